"""safetensors cross-checks: ModelOpt NVFP4 checkpoints written by the
safetensors package load through nvfp4moe, and nvfp4moe's files read back
with the safetensors package."""
import json

import ml_dtypes
import numpy as np
import pytest
import safetensors
import safetensors.numpy as stn

from conftest import dequant_modelopt, random_scale_bytes

PROJECTIONS = ("gate_proj", "up_proj", "down_proj")


def modelopt_layer(rng, prefix, layer, E, F, H):
    """Per-expert ModelOpt tensors of one layer, plus what they decode to."""
    tensors, ref = {}, {}
    for proj in PROJECTIONS:
        n, k = (H, F) if proj == "down_proj" else (F, H)
        deq = []
        alphas = []
        for e in range(E):
            base = f"{prefix}layers.{layer}.mlp.experts.{e}.{proj}"
            weight = rng.integers(0, 256, size=(n, k // 2), dtype=np.uint8)
            scale = random_scale_bytes(rng, (n, k // 16)).view(ml_dtypes.float8_e4m3fn)
            alpha = np.array(rng.uniform(1e-4, 1e-3), dtype=np.float32)
            tensors[f"{base}.weight"] = weight
            tensors[f"{base}.weight_scale"] = scale
            # ModelOpt stores weight_scale_2 as a 0-d tensor; some exports use [1].
            tensors[f"{base}.weight_scale_2"] = alpha if e % 2 == 0 else alpha.reshape(1)
            tensors[f"{base}.input_scale"] = np.array(0.5 + e, dtype=np.float32)
            deq.append(dequant_modelopt(weight, scale))
            alphas.append(alpha)
        ref[proj] = (np.stack(deq), np.array(alphas, dtype=np.float32))
    router = rng.standard_normal((E, H)).astype(ml_dtypes.bfloat16)
    tensors[f"{prefix}layers.{layer}.mlp.gate.weight"] = router
    ref["router"] = router.astype(np.float32)
    return tensors, ref


def check_layer(out, facts, ref, E, F, H, top_k, norm):
    assert facts["format"] == "safetensors"
    assert (facts["num_experts"], facts["hidden"], facts["ffn"]) == (E, H, F)
    assert (facts["top_k"], facts["norm_topk"], facts["merged"]) == (top_k, norm, False)
    for proj, short in zip(PROJECTIONS, ("gate", "up", "down")):
        deq, alpha = ref[proj]
        np.testing.assert_array_equal(np.load(out / f"{short}_alpha.npy"), alpha)
        np.testing.assert_allclose(np.load(out / f"{short}.npy"), deq * alpha[:, None, None], rtol=1e-6, atol=0,
                                   err_msg=proj)
        np.testing.assert_array_equal(np.load(out / f"{short}_input_scale.npy"), 0.5 + np.arange(E))
    np.testing.assert_array_equal(np.load(out / "router.npy"), ref["router"])


def test_sharded_modelopt_checkpoint(io_tool, tmp_path, rng):
    E, F, H = 3, 64, 128
    prefix = "model.language_model."
    tensors, ref = modelopt_layer(rng, prefix, 5, E, F, H)
    names = sorted(tensors)
    shards = {"model-00001-of-00002.safetensors": names[: len(names) // 2],
              "model-00002-of-00002.safetensors": names[len(names) // 2:]}
    weight_map = {}
    for shard, shard_names in shards.items():
        stn.save_file({n: tensors[n] for n in shard_names}, tmp_path / shard, metadata={"format": "pt"})
        weight_map.update({n: shard for n in shard_names})
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    (tmp_path / "config.json").write_text(json.dumps(
        {"architectures": ["Qwen3MoeForCausalLM"], "num_experts": E, "num_experts_per_tok": 2,
         "norm_topk_prob": True}))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(
        {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "group_size": 16}}))
    out = tmp_path / "out"
    out.mkdir()
    facts = io_tool.json("load-layer", tmp_path, 5, out)
    check_layer(out, facts, ref, E, F, H, top_k=2, norm=True)

    # The single-file form, through the file path itself.
    single = tmp_path / "single"
    single.mkdir()
    stn.save_file(tensors, single / "model.safetensors")
    out2 = tmp_path / "out2"
    out2.mkdir()
    facts = io_tool.json("load-layer", single / "model.safetensors", 5, out2)
    check_layer(out2, facts, ref, E, F, H, top_k=0, norm=False)

    proc = io_tool.run("load-layer", single / "model.safetensors", 4, out2, expect_ok=False)
    assert proc.returncode == 1 and "layers with experts: 5" in proc.stderr


def test_group_size_32_is_refused(io_tool, tmp_path, rng):
    tensors, _ = modelopt_layer(rng, "model.", 0, 2, 64, 64)
    stn.save_file(tensors, tmp_path / "model.safetensors")
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "NVFP4",
                                                                                "group_size": 32}}))
    proc = io_tool.run("load-layer", tmp_path, 0, tmp_path, expect_ok=False)
    assert proc.returncode == 1
    assert "group_size = 32" in proc.stderr


def test_package_file_listing(io_tool, tmp_path, rng):
    tensors = {
        "f32": rng.standard_normal((2, 3)).astype(np.float32),
        "f16": rng.standard_normal(5).astype(np.float16),
        "bf16": rng.standard_normal((4, 1)).astype(ml_dtypes.bfloat16),
        "f64": np.array(3.5),
        "i64": np.arange(6, dtype=np.int64).reshape(3, 2),
        "empty": np.zeros((0, 4), dtype=np.int32),
        "fp8": rng.integers(0, 0x7F, 8, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn),
        "flag": np.array([True, False]),
    }
    stn.save_file(tensors, tmp_path / "p.safetensors", metadata={"who": "numpy"})
    info = io_tool.json("info", tmp_path / "p.safetensors")
    assert info["metadata"] == {"who": "numpy"}
    listed = {t["name"]: t for t in info["tensors"]}
    dtype_names = {"f32": "F32", "f16": "F16", "bf16": "BF16", "f64": "F64", "i64": "I64", "empty": "I32",
                   "fp8": "F8_E4M3", "flag": "BOOL"}
    for name, arr in tensors.items():
        assert listed[name]["dtype"] == dtype_names[name]
        assert listed[name]["shape"] == list(arr.shape)
    for name in ("f32", "f16", "bf16", "f64"):
        io_tool.run("dequant", tmp_path / "p.safetensors", name, tmp_path / "d.npy")
        np.testing.assert_array_equal(np.load(tmp_path / "d.npy"), tensors[name].astype(np.float32))
    for name in ("i64", "fp8", "flag"):
        io_tool.run("raw", tmp_path / "p.safetensors", name, tmp_path / "r.npy")
        np.testing.assert_array_equal(np.load(tmp_path / "r.npy"), np.frombuffer(tensors[name].tobytes(), np.uint8))


def test_our_file_reads_with_safetensors_package(io_tool, tmp_path, rng):
    a = rng.standard_normal((3, 4)).astype(np.float32)
    ids = rng.integers(-1000, 1000, (2, 5)).astype(np.int32)
    scales = rng.integers(0, 0x7F, (4, 2)).astype(np.uint8)
    experts = (rng.standard_normal((2, 64, 64)) * 0.02).astype(np.float32)
    for name, arr in {"a": a, "ids": ids, "scales": scales, "experts": experts}.items():
        np.save(tmp_path / f"{name}.npy", arr)
    manifest = {
        "metadata": {"format": "pt", "producer": "nvfp4moe"},
        "tensors": [
            {"name": "x.f32", "dtype": "F32", "npy": str(tmp_path / "a.npy")},
            {"name": "x.bf16", "dtype": "BF16", "npy": str(tmp_path / "a.npy")},
            {"name": "x.i32", "dtype": "I32", "npy": str(tmp_path / "ids.npy")},
            {"name": "x.fp8", "dtype": "F8_E4M3", "npy": str(tmp_path / "scales.npy")},
        ],
        "modelopt": [{"prefix": "model.layers.0.mlp.experts", "proj": "up_proj", "npy": str(tmp_path / "experts.npy")}],
    }
    (tmp_path / "m.json").write_text(json.dumps(manifest))
    path = tmp_path / "ours.safetensors"
    io_tool.run("write-safetensors", path, tmp_path / "m.json")

    raw = {name: spec for name, spec in safetensors.deserialize(path.read_bytes())}
    with safetensors.safe_open(path, framework="np") as f:
        assert f.metadata() == {"format": "pt", "producer": "nvfp4moe"}
        np.testing.assert_array_equal(f.get_tensor("x.f32"), a)
        np.testing.assert_array_equal(f.get_tensor("x.i32"), ids)
    assert raw["x.bf16"]["dtype"] == "BF16" and raw["x.bf16"]["shape"] == [3, 4]
    np.testing.assert_array_equal(np.frombuffer(bytes(raw["x.bf16"]["data"]), ml_dtypes.bfloat16).reshape(3, 4),
                                  a.astype(ml_dtypes.bfloat16))
    assert raw["x.fp8"]["dtype"] == "F8_E4M3"
    assert bytes(raw["x.fp8"]["data"]) == scales.tobytes()

    deq = []
    for e in range(2):
        base = f"model.layers.0.mlp.experts.{e}.up_proj"
        w, s, s2 = raw[f"{base}.weight"], raw[f"{base}.weight_scale"], raw[f"{base}.weight_scale_2"]
        assert (w["dtype"], w["shape"]) == ("U8", [64, 32])
        assert (s["dtype"], s["shape"]) == ("F8_E4M3", [64, 4])
        assert (s2["dtype"], s2["shape"]) == ("F32", [])
        weight = np.frombuffer(bytes(w["data"]), np.uint8).reshape(64, 32)
        scale = np.frombuffer(bytes(s["data"]), np.uint8).reshape(64, 4)
        alpha = np.frombuffer(bytes(s2["data"]), np.float32)[0]
        deq.append(dequant_modelopt(weight, scale) * alpha)
    deq = np.stack(deq)
    nmse = np.sum((deq - experts) ** 2) / np.sum(experts ** 2)
    assert nmse < 0.02, f"NVFP4 quantization error too large: {nmse}"


@pytest.mark.parametrize("header", [b"[]", b"{\"a\": 1}", b"{" * 200, b"\xff\xfe"])
def test_hostile_headers_are_refused(io_tool, tmp_path, header):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(len(header).to_bytes(8, "little") + header)
    proc = io_tool.run("info", bad, expect_ok=False)
    assert proc.returncode == 1
    assert "bad.safetensors" in proc.stderr
