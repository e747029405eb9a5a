"""End-to-end checks of the `nvfp4moe` CLI (CTest passes its path in
NVFP4MOE_CLI). Model files are written with the gguf and safetensors packages;
expected values come from independent numpy / ml_dtypes references
(conftest), never from nvfp4moe itself."""
import json
import os
import subprocess
from pathlib import Path

import gguf
import ml_dtypes
import numpy as np
import pytest
import safetensors
from safetensors.numpy import save_file

from conftest import REPO, dequant_ggml_nvfp4, dequant_modelopt, random_nvfp4_blocks

NVFP4 = gguf.GGMLQuantizationType.NVFP4
E, K_TOP, H, F, LAYER = 4, 2, 128, 64, 1


def _find_cli():
    env = os.environ.get("NVFP4MOE_CLI")
    if env:
        return env
    found = sorted(REPO.glob("build*/nvfp4moe"), key=os.path.getmtime)
    return str(found[-1]) if found else None


@pytest.fixture(scope="session")
def cli():
    path = _find_cli()
    if not path or not os.path.exists(path):
        if os.environ.get("NVFP4MOE_CLI"):
            pytest.fail(f"NVFP4MOE_CLI={path} does not exist")
        pytest.skip("the nvfp4moe CLI is not built (set NVFP4MOE_CLI)")

    def run(*args, ok=True):
        proc = subprocess.run([path, *map(str, args)], capture_output=True, text=True, timeout=300)
        if ok and proc.returncode != 0:
            raise AssertionError(f"nvfp4moe {' '.join(map(str, args))} failed ({proc.returncode}):\n{proc.stderr}")
        if not ok:
            assert proc.returncode != 0, f"nvfp4moe {' '.join(map(str, args))} should have failed:\n{proc.stdout}"
        return proc

    return run


def bf16(x):
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


def silu(g):
    return g / (1.0 + np.exp(-g))


def random_ids(rng, T, k, n_experts):
    return np.stack([rng.permutation(n_experts)[:k] for _ in range(T)]).astype(np.int32)


def nvfp4_blocks(rng, rows, k):
    """Random block_nvfp4 bytes with scale bit 7 clear: ggml ignores that bit,
    but the ops refuse it as a negative (corrupt) scale."""
    blocks = random_nvfp4_blocks(rng, rows, k).reshape(rows, k // 64, 36)
    blocks[..., :4] &= 0x7F
    return blocks.reshape(rows, -1)


def write_gguf_model(path, rng, merged=False):
    """A llama.cpp-style NVFP4 MoE layer LAYER: experts, .scale, router."""
    w = gguf.GGUFWriter(path, arch="qwen3moe")
    w.add_expert_count(E)
    w.add_expert_used_count(K_TOP)
    w.add_expert_weights_norm(True)
    dense = {}
    projections = [("ffn_gate_up_exps", 2 * F, H)] if merged else [("ffn_gate_exps", F, H), ("ffn_up_exps", F, H)]
    projections.append(("ffn_down_exps", H, F))
    for name, n, k in projections:
        raw = nvfp4_blocks(rng, E * n, k).reshape(E, n, k // 64 * 36)
        w.add_tensor(f"blk.{LAYER}.{name}.weight", raw, raw_dtype=NVFP4)
        scale = rng.uniform(0.01, 0.05, E).astype(np.float32)
        w.add_tensor(f"blk.{LAYER}.{name}.scale", scale)
        dense[name] = (dequant_ggml_nvfp4(raw, [k, n, E]).astype(np.float64), scale.astype(np.float64))
    router = rng.standard_normal((E, H)).astype(np.float32)
    w.add_tensor(f"blk.{LAYER}.ffn_gate_inp.weight", router)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return dense, router


def bf16_tie_slack(h, rel=1e-5):
    """Per element of h (float64, before its BF16 rounding): the BF16 step a
    rounding may take the other way, where h lies within `rel` of a rounding
    midpoint (the library's FP32 h and float64 may then round to opposite
    neighbours; seed 16472672732726503445 had h = 8.1562506 in float64 and
    exactly the midpoint 8.15625 in FP32); 0 elsewhere. rel covers FP32
    accumulation over H = 128 products, ~128 * 2^-24 = 8e-6 at worst."""
    return np.abs(bf16(h * (1 + rel)) - bf16(h * (1 - rel)))


def layer_reference(dense, x, ids, weights, slack=None):
    """float64 MoE layer on BF16-rounded x, h and slot rows alpha * (down @ h),
    each slot's row weighted by its router weight in the sum (the library's
    numerics). With `slack` (an array shaped like the output), adds to it the
    most each output can move when a rounding near a BF16 tie goes the other
    way: an h, whose shift moves the slot row by up to alpha * (|down| @ h's
    slack), or the slot row itself, whose FP32 sum differs from float64 by
    up to ~1e-5 of its terms' magnitudes (bf16_tie_slack's rel)."""
    if "ffn_gate_up_exps" in dense:
        gu, gu_alpha = dense["ffn_gate_up_exps"]
        gate, up = gu[:, :F], gu[:, F:]
        g_alpha = u_alpha = gu_alpha
    else:
        (gate, g_alpha), (up, u_alpha) = dense["ffn_gate_exps"], dense["ffn_up_exps"]
    down, d_alpha = dense["ffn_down_exps"]
    xb = bf16(x)
    out = np.zeros((x.shape[0], H))
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = ids[t, j]
            g = g_alpha[e] * (gate[e] @ xb[t])
            u = u_alpha[e] * (up[e] @ xb[t])
            h64 = silu(g) * u
            h = bf16(h64)
            y64 = d_alpha[e] * (down[e] @ h)
            out[t] += weights[t, j] * bf16(y64)
            if slack is not None:
                shift = abs(d_alpha[e]) * (np.abs(down[e]) @ (bf16_tie_slack(h64) + 1e-5 * np.abs(h)))
                slack[t] += abs(weights[t, j]) * np.abs(bf16(y64 + shift) - bf16(y64 - shift))
    return out


def assert_close(ours, ref, rtol=2e-5, slack=0.0):
    """Relative to the output's scale: FP32 accumulation differs from float64
    by rounding only (plus `slack`, per element, where a rounding tie may
    break either way)."""
    scale = np.max(np.abs(ref)) or 1.0
    err = np.abs(np.asarray(ours, dtype=np.float64) - ref)
    bound = rtol * scale + np.broadcast_to(slack, err.shape)
    bad = ~(err <= bound)  # a NaN is bad
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, np.nan_to_num(err, nan=np.inf) - bound, -np.inf)), err.shape)
        raise AssertionError(f"{bad.sum()} of {bad.size} elements beyond the bound; worst at {i}: ours {ours[i]}, "
                             f"reference {ref[i]}, bound {bound[i]}")


def test_info_lists_cpu_features_and_cuda(cli):
    out = cli("info").stdout
    assert "avx2" in out and "avx512f" in out and "threads:" in out
    assert "cuda backend:" in out and "cuda devices:" in out


def test_bench_writes_a_table_and_json_records(cli, tmp_path):
    out = tmp_path / "bench.json"
    proc = cli("bench", "--device", "cpu", "--tokens", "1,3", "--reps", "2", "--op", "gate_up,down", "--json", out)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("|")]
    assert lines[0].split("|")[1:-1] == [" preset        ", " op      ", " tokens ", " routing ", " schedule ",
                                         " time (µs, median) ", " TFLOP/s ", " GB/s ", " tokens/s "]
    assert len(lines) == 2 + 4
    assert "[4/4]" in proc.stderr  # progress
    records = json.loads(out.read_text())
    assert [(r["op"], r["tokens"]) for r in records] == [("gate_up", 1), ("gate_up", 3), ("down", 1), ("down", 3)]
    for r in records:
        for key in ("device_name", "commit", "date", "command_line", "routing", "schedule", "us", "tflops", "gbps",
                    "tokens_per_s"):
            assert key in r, key
        assert r["device"] == "cpu" and r["preset"] == "qwen3-30b-a3b" and r["reps"] == 2 and r["x_dtype"] == "f32"
        assert r["us"] > 0 and r["routing"] == "uniform" and r["schedule"] == "compact"
        assert r["date"].endswith("Z") and "bench" in r["command_line"]
        n, k = (2 * 768, 2048) if r["op"] == "gate_up" else (2048, 768)
        assert r["flops"] == 2 * r["tokens"] * 8 * n * k
        # T tokens x 8 distinct experts hit at most min(8T, 128) experts.
        experts_hit = r["weight_bytes"] / (n * (k // 2 + k // 16))
        assert experts_hit == int(experts_hit) and 8 <= experts_hit <= 8 * r["tokens"]
        assert r["tflops"] == pytest.approx(r["flops"] / r["us"] * 1e-6)
        assert r["gbps"] == pytest.approx(r["weight_bytes"] / r["us"] * 1e-3)


def test_bench_layer_variants(cli, tmp_path):
    out = tmp_path / "bench.json"
    cli("bench", "--device", "cpu", "--preset", "qwen3-30b-a3b", "--op", "layer", "--tokens", "2", "--reps", "1",
        "--routing", "uniform,zipf:1.5", "--schedule", "compact,rect", "--unfused", "--json", out)
    records = json.loads(out.read_text())
    assert [(r["routing"], r["schedule"]) for r in records] == [
        ("uniform", "compact"), ("uniform", "rect"), ("zipf1.5", "compact"), ("zipf1.5", "rect")]
    assert all(r["unfused"] and r["op"] == "layer" for r in records)


@pytest.mark.parametrize("args, named", [
    (["--preset", "qwen4"], "qwen4"),
    (["--routing", "zipf:-1"], "zipf:-1"),
    (["--routing", "normal"], "normal"),
    (["--op", "gateup"], "gateup"),
    (["--schedule", "dense"], "dense"),
    (["--tokens", "0"], "--tokens 0"),
    (["--device", "tpu"], "tpu"),
    (["--op", "gate_up", "--unfused"], "--unfused"),
    (["--x-dtype", "fp8"], "fp8"),
    (["--x-dtype", "bf16"], "--x-dtype bf16"),  # the CPU bench takes F32 only
])
def test_bench_rejects_bad_arguments_by_name(cli, tmp_path, args, named):
    out = tmp_path / "never.json"
    proc = cli("bench", "--device", "cpu", *args, "--json", out, ok=False) if "--device" not in args else \
        cli("bench", *args, "--json", out, ok=False)
    assert named in proc.stderr
    assert not out.exists()


def test_bench_json_into_a_missing_directory_fails_cleanly(cli, tmp_path):
    out = tmp_path / "no" / "such" / "dir.json"
    proc = cli("bench", "--device", "cpu", "--tokens", "1", "--reps", "1", "--json", out, ok=False)
    assert "--json" in proc.stderr
    assert not out.exists()


# ---- GGUF: inspect, dequant, matmul-id, run -------------------------------------


def test_inspect_gguf_and_npy(cli, tmp_path, rng):
    path = tmp_path / "m.gguf"
    write_gguf_model(path, rng)
    out = cli("inspect", path).stdout
    assert "GGUF v3" in out and "qwen3moe" in out
    assert f"blk.{LAYER}.ffn_up_exps.weight" in out and "NVFP4" in out
    assert f"[{H}, {F}, {E}]" in out and f"[{E}, {F}, {H}]" in out  # ne and numpy shape
    assert f"MoE layers: {LAYER} (1)" in out
    x = tmp_path / "x.npy"
    np.save(x, np.array([[1.0, -2.0], [3.0, 4.0]], dtype=np.float32))
    out = cli("inspect", x).stdout
    assert "<f4 [2, 2]" in out and "min -2" in out and "max 4" in out


def test_dequant_gguf_is_exact_and_skips_the_scale(cli, tmp_path, rng):
    path = tmp_path / "m.gguf"
    dense, _ = write_gguf_model(path, rng)
    out = tmp_path / "w.npy"
    proc = cli("dequant", path, f"blk.{LAYER}.ffn_up_exps.weight", "--out", out)
    assert f"blk.{LAYER}.ffn_up_exps.scale" in proc.stderr  # says the scale was not applied
    ours = np.load(out)
    assert ours.dtype == np.float32 and ours.shape == (E, F, H)
    np.testing.assert_array_equal(ours, dense["ffn_up_exps"][0])
    # F32 tensors convert too, with the numpy shape.
    cli("dequant", path, f"blk.{LAYER}.ffn_gate_inp.weight", "--out", out)
    assert np.load(out).shape == (E, H)


@pytest.mark.parametrize("per_slot", [False, True])
def test_matmul_id_gguf_matches_numpy(cli, tmp_path, rng, per_slot):
    path = tmp_path / "m.gguf"
    dense, _ = write_gguf_model(path, rng)
    w, alpha = dense["ffn_gate_exps"]
    T = 5
    x = rng.standard_normal((T, K_TOP, H) if per_slot else (T, H)).astype(np.float32)
    ids = random_ids(rng, T, K_TOP, E)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "ids.npy", ids)
    y_path = tmp_path / "y.npy"
    weights = f"{path}:blk.{LAYER}.ffn_gate_exps.weight"
    cli("matmul-id", "--weights", weights, "--input", tmp_path / "x.npy", "--ids", tmp_path / "ids.npy",
        "--out", y_path, "--device", "cpu")
    y = np.load(y_path)
    assert y.dtype == np.float32 and y.shape == (T, K_TOP, F)
    xb = bf16(x)
    ref = np.stack([[w[ids[t, j]] @ (xb[t, j] if per_slot else xb[t]) for j in range(K_TOP)] for t in range(T)])
    assert_close(y, ref)

    cli("matmul-id", "--weights", weights, "--scale", f"{path}:blk.{LAYER}.ffn_gate_exps.scale",
        "--input", tmp_path / "x.npy", "--ids", tmp_path / "ids.npy", "--out", y_path, "--device", "cpu",
        "--schedule", "rect")
    assert_close(np.load(y_path), ref * alpha[ids][:, :, None])


def test_matmul_id_errors_name_the_argument_and_write_nothing(cli, tmp_path, rng):
    path = tmp_path / "m.gguf"
    write_gguf_model(path, rng)
    x, ids, y = tmp_path / "x.npy", tmp_path / "ids.npy", tmp_path / "y.npy"
    np.save(x, rng.standard_normal((3, H)).astype(np.float32))
    good_ids = random_ids(rng, 3, K_TOP, E)
    np.save(ids, good_ids)
    weights = f"{path}:blk.{LAYER}.ffn_gate_exps.weight"
    base = ["matmul-id", "--device", "cpu", "--input", x, "--ids", ids, "--out", y]

    proc = cli(*base, "--weights", f"{path}:blk.{LAYER}.ffn_nope.weight", ok=False)
    assert f"blk.{LAYER}.ffn_nope.weight" in proc.stderr
    proc = cli(*base, "--weights", f"{path}:blk.{LAYER}.ffn_gate_inp.weight", ok=False)
    assert "not NVFP4" in proc.stderr
    proc = cli(*base, "--weights", "no-colon", ok=False)
    assert "FILE:TENSOR" in proc.stderr

    bad = good_ids.copy()
    bad[2, 1] = E + 3
    np.save(ids, bad)
    proc = cli(*base, "--weights", weights, ok=False)
    assert "ids[2][1]" in proc.stderr and str(E + 3) in proc.stderr
    np.save(ids, good_ids)

    np.save(x, rng.standard_normal((3, H + 64)).astype(np.float32))
    proc = cli(*base, "--weights", weights, ok=False)
    assert f"K = {H + 64}" in proc.stderr
    assert not y.exists()


@pytest.mark.parametrize("merged", [False, True])
def test_run_gguf_with_given_routing_matches_numpy(cli, tmp_path, rng, merged):
    path = tmp_path / "m.gguf"
    dense, _ = write_gguf_model(path, rng, merged=merged)
    T = 4
    x = rng.standard_normal((T, H)).astype(np.float32)
    ids = random_ids(rng, T, K_TOP, E)
    w = rng.uniform(0.1, 1.0, (T, K_TOP)).astype(np.float32)
    for name, arr in (("x", x), ("ids", ids), ("w", w)):
        np.save(tmp_path / f"{name}.npy", arr)
    out = tmp_path / "y.npy"
    cli("run", "--model", path, "--layer", LAYER, "--input", tmp_path / "x.npy", "--ids", tmp_path / "ids.npy",
        "--route-weights", tmp_path / "w.npy", "--out", out, "--device", "cpu")
    y = np.load(out)
    assert y.dtype == np.float32 and y.shape == (T, H)
    slack = np.zeros((T, H))
    ref = layer_reference(dense, x, ids, w, slack)
    assert_close(y, ref, rtol=1e-4, slack=slack)


def test_run_gguf_router_softmax_top_k_normalised(cli, tmp_path, rng):
    path = tmp_path / "m.gguf"
    dense, router = write_gguf_model(path, rng)
    prefix = tmp_path / "used"
    out = tmp_path / "y.npy"
    proc = cli("run", "--model", path, "--layer", LAYER, "--tokens", 6, "--out", out, "--save-inputs", prefix,
               "--device", "cpu")
    assert "router top-2" in proc.stdout
    x = np.load(f"{prefix}.x.npy")
    ids = np.load(f"{prefix}.ids.npy")
    w = np.load(f"{prefix}.route_weights.npy")
    assert x.shape == (6, H) and ids.shape == (6, K_TOP) and w.shape == (6, K_TOP)
    logits = x.astype(np.float64) @ router.astype(np.float64).T
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    want_ids = np.argsort(-p, axis=1, kind="stable")[:, :K_TOP]
    np.testing.assert_array_equal(ids, want_ids)
    want_w = np.take_along_axis(p, want_ids, axis=1)
    want_w /= want_w.sum(axis=1, keepdims=True)  # expert_weights_norm = true
    np.testing.assert_allclose(w, want_w, rtol=1e-5)
    slack = np.zeros((x.shape[0], H))
    ref = layer_reference(dense, x, ids, w, slack)
    assert_close(np.load(out), ref, rtol=1e-4, slack=slack)


def test_run_errors(cli, tmp_path, rng):
    path = tmp_path / "m.gguf"
    write_gguf_model(path, rng)
    proc = cli("run", "--model", path, "--layer", 7, "--tokens", 2, "--device", "cpu", ok=False)
    assert "layer 7" in proc.stderr
    proc = cli("run", "--model", path, "--layer", LAYER, "--device", "cpu", ok=False)
    assert "--tokens" in proc.stderr
    np.save(tmp_path / "x.npy", np.zeros((2, H + 1), dtype=np.float32))
    out = tmp_path / "y.npy"
    proc = cli("run", "--model", path, "--layer", LAYER, "--input", tmp_path / "x.npy", "--out", out,
               "--device", "cpu", ok=False)
    assert "--input" in proc.stderr and f"[2, {H + 1}]" in proc.stderr
    assert not out.exists()


def test_device_cuda_without_cuda_is_a_clear_error(cli, tmp_path):
    if "cuda backend: built" in cli("info").stdout:
        pytest.skip("this build has CUDA")
    proc = cli("bench", "--device", "cuda", "--tokens", "1", ok=False)
    assert "--device cuda" in proc.stderr and "without CUDA" in proc.stderr


# ---- safetensors: quantize, then the same commands ------------------------------


def write_dense_checkpoint(directory, rng):
    """A Qwen-style BF16 checkpoint: layer LAYER's experts and router."""
    directory.mkdir()
    tensors = {}
    p = f"model.layers.{LAYER}.mlp"
    for e in range(E):
        for proj, shape in (("gate_proj", (F, H)), ("up_proj", (F, H)), ("down_proj", (H, F))):
            tensors[f"{p}.experts.{e}.{proj}.weight"] = rng.standard_normal(shape).astype(ml_dtypes.bfloat16)
    tensors[f"{p}.gate.weight"] = rng.standard_normal((E, H)).astype(np.float32)
    tensors["model.embed_tokens.weight"] = np.zeros((8, H), dtype=np.float32)
    save_file(tensors, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(
        {"num_experts": E, "num_experts_per_tok": K_TOP, "norm_topk_prob": True}))
    return tensors


def test_quantize_to_gguf_and_safetensors(cli, tmp_path, rng):
    ckpt = tmp_path / "dense"
    dense = write_dense_checkpoint(ckpt, rng)
    p = f"model.layers.{LAYER}.mlp"
    cli("quantize", ckpt, tmp_path / "q.gguf")
    cli("quantize", ckpt, tmp_path / "q.safetensors")

    # GGUF as llama.cpp names it, read with the gguf package.
    reader = gguf.GGUFReader(tmp_path / "q.gguf")
    by_name = {t.name: t for t in reader.tensors}
    for ours, theirs, (n, k) in (("ffn_gate_exps", "gate_proj", (F, H)), ("ffn_up_exps", "up_proj", (F, H)),
                                 ("ffn_down_exps", "down_proj", (H, F))):
        t = by_name[f"blk.{LAYER}.{ours}.weight"]
        assert t.tensor_type == NVFP4 and [int(d) for d in t.shape] == [k, n, E]
        alpha = np.asarray(by_name[f"blk.{LAYER}.{ours}.scale"].data, dtype=np.float64)
        values = dequant_ggml_nvfp4(np.asarray(t.data).reshape(-1), [k, n, E]) * alpha[:, None, None]
        want = np.stack([dense[f"{p}.experts.{e}.{theirs}.weight"].astype(np.float64) for e in range(E)])
        nmse = np.sum((values - want) ** 2) / np.sum(want ** 2)
        assert nmse < 0.02, (ours, nmse)  # 4-bit quantization of Gaussian weights: ~0.01
    router = by_name[f"blk.{LAYER}.ffn_gate_inp.weight"]
    np.testing.assert_array_equal(np.asarray(router.data).reshape(E, H), dense[f"{p}.gate.weight"])
    assert "model.embed_tokens.weight" not in str(list(by_name))  # only the MoE layers

    # ModelOpt names in safetensors, read with the safetensors package: the
    # same codes as the GGUF file.
    st = {name: spec for name, spec in safetensors.deserialize((tmp_path / "q.safetensors").read_bytes())}
    base = f"{p}.experts.2.up_proj"
    assert (st[f"{base}.weight"]["dtype"], st[f"{base}.weight"]["shape"]) == ("U8", [F, H // 2])
    assert (st[f"{base}.weight_scale"]["dtype"], st[f"{base}.weight_scale"]["shape"]) == ("F8_E4M3", [F, H // 16])
    up = dequant_modelopt(np.frombuffer(bytes(st[f"{base}.weight"]["data"]), np.uint8).reshape(F, H // 2),
                          np.frombuffer(bytes(st[f"{base}.weight_scale"]["data"]), np.uint8).reshape(F, H // 16))
    up_gguf = dequant_ggml_nvfp4(np.asarray(by_name[f"blk.{LAYER}.ffn_up_exps.weight"].data).reshape(-1), [H, F, E])
    np.testing.assert_array_equal(up, up_gguf[2])
    np.testing.assert_array_equal(np.frombuffer(bytes(st[f"{base}.weight_scale_2"]["data"]), np.float32),
                                  np.asarray(by_name[f"blk.{LAYER}.ffn_up_exps.scale"].data)[2:3])

    # Both files run to the same output (same weights, same routing).
    x = rng.standard_normal((3, H)).astype(np.float32)
    ids = random_ids(rng, 3, K_TOP, E)
    w = rng.uniform(0.2, 1, (3, K_TOP)).astype(np.float32)
    for name, arr in (("x", x), ("ids", ids), ("w", w)):
        np.save(tmp_path / f"{name}.npy", arr)
    outs = []
    for model in ("q.gguf", "q.safetensors"):
        out = tmp_path / f"{model}.y.npy"
        cli("run", "--model", tmp_path / model, "--layer", LAYER, "--input", tmp_path / "x.npy",
            "--ids", tmp_path / "ids.npy", "--route-weights", tmp_path / "w.npy", "--out", out, "--device", "cpu")
        outs.append(np.load(out))
    np.testing.assert_array_equal(outs[0], outs[1])

    # matmul-id with a '*' pattern over the ModelOpt experts equals the GGUF tensor.
    ys = []
    for weights in (f"{tmp_path / 'q.gguf'}:blk.{LAYER}.ffn_down_exps.weight",
                    f"{tmp_path / 'q.safetensors'}:{p}.experts.*.down_proj.weight"):
        np.save(tmp_path / "h.npy", rng.standard_normal((3, F)).astype(np.float32)) if not ys else None
        cli("matmul-id", "--weights", weights, "--input", tmp_path / "h.npy", "--ids", tmp_path / "ids.npy",
            "--out", tmp_path / "yd.npy", "--device", "cpu")
        ys.append(np.load(tmp_path / "yd.npy"))
    np.testing.assert_array_equal(ys[0], ys[1])

    # dequant of a '*' pattern stacks the experts.
    cli("dequant", tmp_path / "q.safetensors", f"{p}.experts.*.up_proj.weight", "--out", tmp_path / "up.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "up.npy"), up_gguf)


def test_quantize_rejects_an_unknown_output_format(cli, tmp_path, rng):
    ckpt = tmp_path / "dense"
    write_dense_checkpoint(ckpt, rng)
    proc = cli("quantize", ckpt, tmp_path / "q.bin", ok=False)
    assert "q.bin" in proc.stderr and ".gguf" in proc.stderr
    assert not (tmp_path / "q.bin").exists()
    proc = cli("quantize", ckpt, tmp_path / "q.gguf", "--layers", "5", ok=False)
    assert "--layers 5" in proc.stderr
    assert not (tmp_path / "q.gguf").exists()


# ---- CUDA (skipped without a supported device) -----------------------------------


def test_cuda_paths_match_the_cpu(cli, tmp_path, rng):
    info = cli("info").stdout
    if "cuda backend: built" not in info or "kernels: supported" not in info:
        pytest.skip("no CUDA device the kernels support")
    path = tmp_path / "m.gguf"
    write_gguf_model(path, rng)
    T = 9
    arrays = {"x": rng.standard_normal((T, H)).astype(np.float32),
              "xs": rng.standard_normal((T, K_TOP, F)).astype(np.float32),
              "ids": random_ids(rng, T, K_TOP, E),
              "w": rng.uniform(0.1, 1, (T, K_TOP)).astype(np.float32)}
    for name, arr in arrays.items():
        np.save(tmp_path / f"{name}.npy", arr)
    g = f"{path}:blk.{LAYER}."
    commands = {
        "gate": ["matmul-id", "-w", g + "ffn_gate_exps.weight", "--scale", g + "ffn_gate_exps.scale",
                 "-x", tmp_path / "x.npy", "--ids", tmp_path / "ids.npy"],
        "down_per_slot_rect": ["matmul-id", "-w", g + "ffn_down_exps.weight", "-x", tmp_path / "xs.npy",
                               "--ids", tmp_path / "ids.npy", "--schedule", "rect"],
        "layer": ["run", "-m", path, "-l", LAYER, "-x", tmp_path / "x.npy", "--ids", tmp_path / "ids.npy",
                  "--route-weights", tmp_path / "w.npy"],
        "layer_router": ["run", "-m", path, "-l", LAYER, "-x", tmp_path / "x.npy"],
    }
    for name, args in commands.items():
        cli(*args, "--device", "cpu", "-o", tmp_path / f"{name}.cpu.npy")
        cli(*args, "--device", "cuda", "-o", tmp_path / f"{name}.cuda.npy")
        cpu, gpu = np.load(tmp_path / f"{name}.cpu.npy"), np.load(tmp_path / f"{name}.cuda.npy")
        assert cpu.shape == gpu.shape, name
        nmse = np.sum((gpu.astype(np.float64) - cpu) ** 2) / np.sum(cpu.astype(np.float64) ** 2)
        assert nmse < 1e-5, (name, nmse)  # same BF16 inputs, FP32 sums in another order
    cli(*commands["layer"], "--device", "cuda", "--unfused", "-o", tmp_path / "unfused.npy")
    unfused = np.load(tmp_path / "unfused.npy")
    cpu = np.load(tmp_path / "layer.cpu.npy")
    assert np.sum((unfused.astype(np.float64) - cpu) ** 2) / np.sum(cpu.astype(np.float64) ** 2) < 1e-5
