"""The CLI's side of docs/reliability.md: errors name the argument and the
value, exit non-zero without a crash, and never leave a half-written (or
replaced) output file; non-finite inputs propagate; T = 0 works. Model files
come from the gguf package (test_cli.write_gguf_model)."""
import os

import numpy as np
import pytest

from test_cli import E, F, H, K_TOP, LAYER, cli, random_ids, write_gguf_model  # noqa: F401 (cli is a fixture)


@pytest.fixture
def model(tmp_path, rng):
    path = tmp_path / "m.gguf"
    write_gguf_model(path, rng)
    return path


def matmul_id(cli, model, x, ids, out, ok=True):
    return cli("matmul-id", "--weights", f"{model}:blk.{LAYER}.ffn_up_exps.weight", "--input", x, "--ids", ids,
               "--out", out, "--device", "cpu", ok=ok)


def assert_clean_failure(proc):
    # A non-zero exit from the tool itself, not a signal (negative) or a
    # sanitizer report.
    assert proc.returncode == 1, proc.stderr
    assert "ERROR: AddressSanitizer" not in proc.stderr and "runtime error" not in proc.stderr
    assert ": error: " in proc.stderr.strip().splitlines()[-1], proc.stderr


def test_failed_call_keeps_the_previous_output_file_and_leaves_no_temporary(cli, model, tmp_path, rng):
    x, ids, out = tmp_path / "x.npy", tmp_path / "ids.npy", tmp_path / "y.npy"
    np.save(x, rng.standard_normal((3, H)).astype(np.float32))
    np.save(ids, random_ids(rng, 3, K_TOP, E))
    matmul_id(cli, model, x, ids, out)
    before = out.read_bytes()
    bad = random_ids(rng, 3, K_TOP, E)
    bad[1, 1] = bad[1, 0]  # duplicate expert in token 1
    np.save(ids, bad)
    proc = matmul_id(cli, model, x, ids, out, ok=False)
    assert_clean_failure(proc)
    assert "ids[1][0] and ids[1][1] are both expert" in proc.stderr
    assert out.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["ids.npy", "m.gguf", "x.npy", "y.npy"]


@pytest.mark.parametrize("what, ids, named", [
    ("out of range", lambda rng: np.array([[0, E]], dtype=np.int32), f"ids[0][1] = {E} is out of range"),
    ("negative", lambda rng: np.array([[-1, 0]], dtype=np.int32), "ids[0][0] = -1"),
    ("k > E", lambda rng: np.tile(np.arange(E + 1, dtype=np.int32), (1, 1)), f"top_k = {E + 1}"),
    ("float dtype", lambda rng: np.array([[0.0, 1.0]], dtype=np.float32), "floating point"),
    ("int64 beyond int32", lambda rng: np.array([[0, 1 << 40]], dtype=np.int64), "does not fit int32"),
    ("rank 1", lambda rng: np.array([0, 1], dtype=np.int32), "expected [T, k]"),
])
def test_bad_ids_are_named(cli, model, tmp_path, rng, what, ids, named):
    x, ids_path, out = tmp_path / "x.npy", tmp_path / "ids.npy", tmp_path / "y.npy"
    np.save(x, rng.standard_normal((1, H)).astype(np.float32))
    np.save(ids_path, ids(rng))
    proc = matmul_id(cli, model, x, ids_path, out, ok=False)
    assert_clean_failure(proc)
    assert named in proc.stderr and "--ids" in proc.stderr
    assert not out.exists()


def test_non_finite_inputs_propagate_to_their_token(cli, model, tmp_path, rng):
    x = rng.standard_normal((3, H)).astype(np.float32)
    x[1, 7] = np.nan
    x[2, 0] = np.inf
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "ids.npy", random_ids(rng, 3, K_TOP, E))
    proc = matmul_id(cli, model, tmp_path / "x.npy", tmp_path / "ids.npy", tmp_path / "y.npy")
    assert "NaN/inf" in proc.stdout
    y = np.load(tmp_path / "y.npy")
    assert np.isfinite(y[0]).all()
    assert np.isnan(y[1]).all()
    assert not np.isfinite(y[2]).any()


def test_zero_tokens_give_an_empty_output(cli, model, tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((0, H), dtype=np.float32))
    np.save(tmp_path / "ids.npy", np.zeros((0, K_TOP), dtype=np.int32))
    matmul_id(cli, model, tmp_path / "x.npy", tmp_path / "ids.npy", tmp_path / "y.npy")
    assert np.load(tmp_path / "y.npy").shape == (0, K_TOP, F)


def test_run_refuses_top_k_beyond_the_experts(cli, model, tmp_path):
    out = tmp_path / "y.npy"
    proc = cli("run", "--model", model, "--layer", LAYER, "--tokens", 2, "--top-k", E + 1, "--out", out,
               "--device", "cpu", ok=False)
    assert_clean_failure(proc)
    assert f"--top-k {E + 1} exceeds the {E} experts" in proc.stderr
    assert not out.exists()


@pytest.mark.parametrize("cut", [10, 100, 1000, -40])
def test_truncated_model_file_is_an_error_naming_the_file(cli, model, tmp_path, rng, cut):
    data = model.read_bytes()
    short = tmp_path / "short.gguf"
    short.write_bytes(data[:cut] if cut > 0 else data[:len(data) + cut])
    np.save(tmp_path / "x.npy", rng.standard_normal((1, H)).astype(np.float32))
    np.save(tmp_path / "ids.npy", random_ids(rng, 1, K_TOP, E))
    proc = matmul_id(cli, short, tmp_path / "x.npy", tmp_path / "ids.npy", tmp_path / "y.npy", ok=False)
    assert_clean_failure(proc)
    assert "short.gguf" in proc.stderr
    assert not (tmp_path / "y.npy").exists()
