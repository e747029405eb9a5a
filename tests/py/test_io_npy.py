""".npy cross-checks: numpy's files read by nvfp4moe and written back, then
read by numpy; the formats nvfp4moe refuses are refused with a clear error."""
import numpy as np
import pytest

DTYPES = ["<f4", "<f8", "<f2", "|i1", "<i2", "<i4", "<i8", "|u1", "<u2", "<u4", "<u8", "|b1"]
SHAPES = [(), (0,), (7,), (3, 4), (2, 1, 3, 2)]


def random_array(rng, dtype, shape):
    dt = np.dtype(dtype)
    if dt.kind == "f":
        return (rng.standard_normal(shape) * 100).astype(dt)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    info = np.iinfo(dt)
    return rng.integers(info.min, info.max, size=shape, dtype=dt, endpoint=True)


@pytest.mark.parametrize("version", [(1, 0), (2, 0), (3, 0)])
@pytest.mark.parametrize("dtype", DTYPES)
def test_numpy_files_round_trip(io_tool, tmp_path, rng, dtype, version):
    for i, shape in enumerate(SHAPES):
        arr = random_array(rng, dtype, shape)
        src = tmp_path / f"in{i}.npy"
        with open(src, "wb") as f:
            np.lib.format.write_array(f, arr, version=version)
        dst = tmp_path / f"out{i}.npy"
        io_tool.run("npy-copy", src, dst)
        back = np.load(dst)
        assert back.dtype == arr.dtype and back.shape == arr.shape
        np.testing.assert_array_equal(back, arr)
        # Our writer's header is what numpy itself would accept without fuss.
        with open(dst, "rb") as f:
            major, _ = np.lib.format.read_magic(f)
            header = np.lib.format.read_array_header_1_0(f) if major == 1 else None
        assert major == 1 and header[0] == arr.shape and header[1] is False


def test_long_header_uses_version_2(io_tool, tmp_path):
    # A shape whose header cannot fit a 16-bit length makes numpy write 2.0.
    arr = np.zeros((1,) * 32 + (0,), dtype=np.float32)
    src = tmp_path / "long.npy"
    np.save(src, arr)
    io_tool.run("npy-copy", src, tmp_path / "out.npy")
    assert np.load(tmp_path / "out.npy").shape == arr.shape


@pytest.mark.parametrize("arr, message", [
    (np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)), "fortran_order"),
    (np.arange(3, dtype=">f4"), "big-endian"),
    (np.arange(3, dtype=np.complex64), "not supported"),
    (np.zeros(2, dtype=[("a", "<f4"), ("b", "<i4")]), "structured"),
])
def test_refused_formats_name_the_reason(io_tool, tmp_path, arr, message):
    src = tmp_path / "in.npy"
    np.save(src, arr)
    proc = io_tool.run("npy-copy", src, tmp_path / "out.npy", expect_ok=False)
    assert proc.returncode == 1
    assert message in proc.stderr and "in.npy" in proc.stderr
    assert not (tmp_path / "out.npy").exists()


def test_truncated_numpy_file_is_refused(io_tool, tmp_path):
    data = (tmp_path / "x.npy")
    np.save(data, np.arange(10, dtype=np.int32))
    raw = data.read_bytes()
    for cut in (0, 5, 9, 20, len(raw) - 40, len(raw) - 1):
        (tmp_path / "cut.npy").write_bytes(raw[:cut])
        proc = io_tool.run("npy-copy", tmp_path / "cut.npy", tmp_path / "out.npy", expect_ok=False)
        assert proc.returncode == 1, cut
