"""GGUF cross-checks: files written by the gguf package read back with
nvfp4moe, and nvfp4moe's files read back with gguf.GGUFReader. NVFP4 values
are checked against an independent ml_dtypes decoder (conftest) and against
the gguf package's own dequantizer."""
import json

import gguf
import ml_dtypes
import numpy as np
import pytest

from conftest import dequant_ggml_nvfp4, random_nvfp4_blocks

NVFP4 = gguf.GGMLQuantizationType.NVFP4
assert int(NVFP4) == 40, "ggml type id of NVFP4"


def write_gguf_package_layer(path, rng, E=4, F=64, H=128, merged=False):
    """A llama.cpp-style MoE layer 3 written by the gguf package."""
    w = gguf.GGUFWriter(path, arch="qwen3moe")
    w.add_expert_count(E)
    w.add_expert_used_count(2)
    w.add_expert_weights_norm(True)
    w.add_uint8("t.u8", 250)
    w.add_int8("t.i8", -5)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4000000000)
    w.add_int32("t.i32", -2000000000)
    w.add_uint64("t.u64", 2**63 + 5)
    w.add_int64("t.i64", -(2**62))
    w.add_float32("t.f32", 0.125)
    w.add_float64("t.f64", 1e-300)
    w.add_bool("t.bool", False)
    w.add_string("t.str", "héllo")
    w.add_array("t.arr_str", ["a", "bc", ""])
    w.add_array("t.arr_float", [1.5, -2.5])
    w.add_array("t.arr_nested", [[1, 2], [3]])

    tensors = {}
    gate_rows = 2 * F if merged else F
    projections = [("ffn_gate_up_exps", gate_rows, H)] if merged else [("ffn_gate_exps", F, H), ("ffn_up_exps", F, H)]
    projections.append(("ffn_down_exps", H, F))
    for name, n, k in projections:
        raw = random_nvfp4_blocks(rng, E * n, k).reshape(E, n, k // 64 * 36)
        w.add_tensor(f"blk.3.{name}.weight", raw, raw_dtype=NVFP4)
        ne = [k, n, E]
        if name == "ffn_down_exps":
            scale = np.array([0.75], dtype=np.float32)  # scalar, broadcast
        else:
            scale = rng.uniform(0.001, 0.01, E).astype(np.float32)
        w.add_tensor(f"blk.3.{name}.scale", scale)
        tensors[name] = (raw, ne, scale)
    in_scale = rng.uniform(0.5, 2, E).astype(np.float32)
    w.add_tensor(f"blk.3.{projections[0][0]}.input_scale", in_scale)
    router = rng.standard_normal((E, H)).astype(np.float32)
    w.add_tensor("blk.3.ffn_gate_inp.weight", router)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors, router, in_scale


@pytest.mark.parametrize("merged", [False, True])
def test_gguf_package_layer_loads(io_tool, tmp_path, rng, merged):
    path = tmp_path / "m.gguf"
    tensors, router, in_scale = write_gguf_package_layer(path, rng, merged=merged)
    out = tmp_path / "out"
    out.mkdir()
    facts = io_tool.json("load-layer", path, 3, out)
    assert facts == {**facts, "format": "gguf", "num_experts": 4, "top_k": 2, "norm_topk": True, "merged": merged,
                     "hidden": 128, "ffn": 64}
    short = {"ffn_gate_exps": "gate", "ffn_up_exps": "up", "ffn_gate_up_exps": "gate_up", "ffn_down_exps": "down"}
    for name, (raw, ne, scale) in tensors.items():
        ours = np.load(out / f"{short[name]}.npy")
        alpha = np.broadcast_to(scale, (4,))
        ref = dequant_ggml_nvfp4(raw, ne) * alpha[:, None, None]
        np.testing.assert_allclose(ours, ref, rtol=1e-6, atol=0, err_msg=name)
        np.testing.assert_array_equal(np.load(out / f"{short[name]}_alpha.npy"), alpha)
    np.testing.assert_array_equal(np.load(out / "router.npy"), router)
    first = "gate_up" if merged else "gate"
    np.testing.assert_array_equal(np.load(out / f"{first}_input_scale.npy"), in_scale)


def test_gguf_package_metadata_and_raw_dequant(io_tool, tmp_path, rng):
    path = tmp_path / "m.gguf"
    tensors, _, _ = write_gguf_package_layer(path, rng)
    info = io_tool.json("info", path)
    md = info["metadata"]
    assert md["general.architecture"] == "qwen3moe"
    assert md["qwen3moe.expert_count"] == 4
    assert md["qwen3moe.expert_weights_norm"] is True
    assert md["t.u8"] == 250 and md["t.i8"] == -5 and md["t.u16"] == 60000 and md["t.i16"] == -30000
    assert md["t.u32"] == 4000000000 and md["t.i32"] == -2000000000
    assert md["t.u64"] == 2**63 + 5 and md["t.i64"] == -(2**62)
    assert md["t.f32"] == 0.125 and md["t.f64"] == 1e-300 and md["t.bool"] is False
    assert md["t.str"] == "héllo"
    assert md["t.arr_str"] == ["a", "bc", ""]
    assert md["t.arr_float"] == [1.5, -2.5]
    assert md["t.arr_nested"] == [[1, 2], [3]]
    assert info["metadata_types"]["t.arr_nested"] == "array:array"

    reader = gguf.GGUFReader(path)
    assert info["data_offset"] == reader.data_offset
    by_name = {t["name"]: t for t in info["tensors"]}
    for t in reader.tensors:
        ours = by_name[t.name]
        assert ours["type"] == int(t.tensor_type)
        assert ours["ne"] == [int(d) for d in t.shape]
        assert reader.data_offset + ours["offset"] == t.data_offset

    raw, ne, _ = tensors["ffn_up_exps"]
    io_tool.run("dequant", path, "blk.3.ffn_up_exps.weight", tmp_path / "d.npy")
    ours = np.load(tmp_path / "d.npy")
    assert list(ours.shape) == list(reversed(ne))
    ref = dequant_ggml_nvfp4(raw, ne)
    np.testing.assert_array_equal(ours, ref)
    # Three-way: the gguf package's own NVFP4 dequantizer agrees (no NaN
    # scales here, where the conventions differ).
    pkg = gguf.quants.dequantize(raw, NVFP4)
    np.testing.assert_array_equal(pkg.reshape(ref.shape), ref)
    io_tool.run("raw", path, "blk.3.ffn_up_exps.weight", tmp_path / "r.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "r.npy"), raw.reshape(-1))


def manifest_metadata():
    return [
        {"key": "general.architecture", "type": "string", "value": "qwen3moe"},
        {"key": "m.u8", "type": "uint8", "value": 7},
        {"key": "m.i8", "type": "int8", "value": -7},
        {"key": "m.u16", "type": "uint16", "value": 65535},
        {"key": "m.i16", "type": "int16", "value": -32768},
        {"key": "m.u32", "type": "uint32", "value": 123456789},
        {"key": "m.i32", "type": "int32", "value": -123456789},
        {"key": "m.u64", "type": "uint64", "value": 2**64 - 1},
        {"key": "m.i64", "type": "int64", "value": -(2**63)},
        {"key": "m.f32", "type": "float32", "value": 3.25},
        {"key": "m.f64", "type": "float64", "value": 0.1},
        {"key": "m.bool", "type": "bool", "value": True},
        {"key": "m.str", "type": "string", "value": "ünïcode ✓"},
        {"key": "m.arr_i32", "type": "array", "elem_type": "int32", "value": [1, -2, 3]},
        {"key": "m.arr_u8", "type": "array", "elem_type": "uint8", "value": [0, 255]},
        {"key": "m.arr_f64", "type": "array", "elem_type": "float64", "value": [0.5, -1e10]},
        {"key": "m.arr_bool", "type": "array", "elem_type": "bool", "value": [True, False, True]},
        {"key": "m.arr_str", "type": "array", "elem_type": "string", "value": ["x", "", "yz"]},
        {"key": "m.arr_nested", "type": "array", "elem_type": "array",
         "value": [{"elem_type": "int16", "value": [1, 2]}, {"elem_type": "int16", "value": [3]}]},
    ]


@pytest.mark.parametrize("alignment", [32, 64])
def test_our_gguf_reads_with_gguf_reader(io_tool, tmp_path, rng, alignment):
    a = rng.standard_normal((5, 3)).astype(np.float32)
    experts = (rng.standard_normal((3, 64, 128)) * 0.02).astype(np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "experts.npy", experts)
    manifest = {
        "alignment": alignment,
        "metadata": manifest_metadata(),
        "tensors": [
            {"name": "a.f32", "kind": "F32", "npy": str(tmp_path / "a.npy")},
            {"name": "a.f16", "kind": "F16", "npy": str(tmp_path / "a.npy")},
            {"name": "a.bf16", "kind": "BF16", "npy": str(tmp_path / "a.npy")},
            {"name": "blk.0.ffn_up_exps", "kind": "NVFP4_EXPERTS", "npy": str(tmp_path / "experts.npy")},
        ],
    }
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    path = tmp_path / "ours.gguf"
    io_tool.run("write-gguf", path, tmp_path / "manifest.json")

    reader = gguf.GGUFReader(path)
    assert reader.alignment == alignment
    fields = reader.fields
    for entry in manifest_metadata():
        f = fields[entry["key"]]
        want = entry["value"]
        if entry["type"] == "array" and entry["elem_type"] == "array":
            assert f.types == [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT16]
            assert f.contents() == [1, 2, 3]  # GGUFReader flattens nested arrays
            continue
        got = f.contents()
        if entry["type"] == "float32":
            assert got == np.float32(want)
        else:
            assert got == want, entry["key"]
        assert f.types[0] == gguf.GGUFValueType[entry["type"].upper()], entry["key"]

    tensors = {t.name: t for t in reader.tensors}
    assert set(tensors) == {"a.f32", "a.f16", "a.bf16", "blk.0.ffn_up_exps.weight", "blk.0.ffn_up_exps.scale"}
    for t in reader.tensors:
        assert t.data_offset % alignment == 0
    assert [int(d) for d in tensors["a.f32"].shape] == [3, 5]  # ggml ne order
    np.testing.assert_array_equal(tensors["a.f32"].data, a)
    np.testing.assert_array_equal(np.asarray(tensors["a.f16"].data), a.astype(np.float16))
    bf16 = gguf.quants.dequantize(tensors["a.bf16"].data, gguf.GGMLQuantizationType.BF16)
    np.testing.assert_array_equal(bf16.reshape(a.shape), a.astype(ml_dtypes.bfloat16).astype(np.float32))

    w = tensors["blk.0.ffn_up_exps.weight"]
    assert w.tensor_type == NVFP4
    assert [int(d) for d in w.shape] == [128, 64, 3]
    pkg = gguf.quants.dequantize(w.data, NVFP4).reshape(3, 64, 128)
    ref = dequant_ggml_nvfp4(np.asarray(w.data).reshape(-1), [128, 64, 3])
    np.testing.assert_array_equal(pkg, ref)
    io_tool.run("dequant", path, "blk.0.ffn_up_exps.weight", tmp_path / "d.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "d.npy"), ref)
    alpha = np.asarray(tensors["blk.0.ffn_up_exps.scale"].data)
    assert alpha.shape == (3,) and np.all(alpha > 0)
    deq = ref * alpha[:, None, None]
    nmse = np.sum((deq - experts) ** 2) / np.sum(experts ** 2)
    assert nmse < 0.02, f"NVFP4 quantization error too large: {nmse}"


def test_hostile_gguf_is_refused_cleanly(io_tool, tmp_path):
    good = tmp_path / "good.gguf"
    w = gguf.GGUFWriter(good, arch="x")
    w.add_tensor("t", np.ones((2, 64), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = good.read_bytes()
    assert len(data) % 32 == 0, "the tensor ends the file, without padding"
    for cut in range(0, len(data), 7):
        bad = tmp_path / "bad.gguf"
        bad.write_bytes(data[:cut])
        proc = io_tool.run("info", bad, expect_ok=False)
        assert proc.returncode == 1, (cut, proc.stdout)
        assert "bad.gguf" in proc.stderr, proc.stderr
