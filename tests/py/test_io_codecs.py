"""nvfp4moe's element codecs against ml_dtypes (float4_e2m1fn, float8_e4m3fn,
bfloat16), on every code and on round-to-nearest-even encoding."""
import ml_dtypes
import numpy as np

from conftest import E2M1_VALUES


def test_decode_tables_match_ml_dtypes(io_tool, tmp_path):
    io_tool.run("codecs", tmp_path)
    e2m1 = np.load(tmp_path / "e2m1.npy")
    np.testing.assert_array_equal(e2m1, E2M1_VALUES)
    np.testing.assert_array_equal(np.signbit(e2m1), np.signbit(E2M1_VALUES))  # code 8 is -0

    ue4m3 = np.load(tmp_path / "ue4m3.npy")
    ref = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    # Bit 7 clear: exactly float8_e4m3fn, 0x7F the NaN.
    np.testing.assert_array_equal(ue4m3[:128], ref[:128])
    assert np.isnan(ue4m3[0x7F])
    # Bit 7 set is ignored (as ggml does): the magnitude of the e4m3fn value.
    np.testing.assert_array_equal(ue4m3[128:], np.abs(ref[128:]))
    assert np.isnan(ue4m3[0xFF])
    assert ue4m3[0x7E] == 448.0


def test_encoders_round_like_ml_dtypes(io_tool, tmp_path, rng):
    grid = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)
    e4 = np.arange(0x7F, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
    # Every representable value, every midpoint (ties), and random values.
    mids4 = (grid[1:8] + grid[:7]) / 2
    mids8 = (e4[1:] + e4[:-1]) / 2
    x = np.concatenate([grid, mids4, -mids4, e4, mids8, np.nextafter(mids8, np.float32(0)),
                        np.nextafter(mids8, np.float32(1e9)),
                        rng.uniform(-6, 6, 4000).astype(np.float32),
                        np.exp(rng.uniform(np.log(2.0 ** -12), np.log(448.0), 4000)).astype(np.float32),
                        rng.standard_normal(2000).astype(np.float32) * 1e3]).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    io_tool.run("encode", tmp_path / "x.npy", tmp_path)
    e2m1 = np.load(tmp_path / "e2m1_codes.npy")
    ue4m3 = np.load(tmp_path / "ue4m3_codes.npy")
    bf16 = np.load(tmp_path / "bf16_bits.npy")

    in4 = np.abs(x) <= 6
    want4 = x[in4].astype(ml_dtypes.float4_e2m1fn).view(np.uint8) & 0x0F
    np.testing.assert_array_equal(e2m1[in4], want4)
    # Saturation beyond the grid (ml_dtypes has no saturating mode to compare).
    big = np.abs(x) > 6
    np.testing.assert_array_equal(E2M1_VALUES[e2m1[big]], np.where(x[big] > 0, 6.0, -6.0))

    in8 = (x > 0) & (x <= 448)
    want8 = x[in8].astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    np.testing.assert_array_equal(ue4m3[in8], want8)
    assert np.all(ue4m3[x <= 0] == 0)
    assert np.all(ue4m3[x > 448] == 0x7E)

    want16 = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    np.testing.assert_array_equal(bf16, want16)
