"""Shared fixtures of the Python cross-checks.

The io cross-checks drive the C++ io library through io_roundtrip_tool (CTest
passes its path in NVFP4MOE_IO_TOOL). The reference decoders here use
ml_dtypes only, independently of nvfp4moe and of the gguf package.
"""
import glob
import json
import os
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]

# E2M1 value of each 4-bit code, from ml_dtypes.
E2M1_VALUES = np.arange(16, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn).astype(np.float32)


def ue4m3(b):
    """nvfp4moe's UE4M3 convention: bit 7 ignored, 0x7F (so 0xFF) is NaN."""
    b = np.asarray(b, dtype=np.uint8) & np.uint8(0x7F)
    return b.view(ml_dtypes.float8_e4m3fn).astype(np.float32)


def dequant_ggml_nvfp4(raw, ne):
    """block_nvfp4 bytes of a tensor with ggml dims ne (fastest first) -> F32
    in numpy order. Per 64-value block: d[4] UE4M3, then qs[32]; sub-block s
    holds value 16s+j in the low nibble of qs[8s+j] and 16s+j+8 in the high."""
    k = ne[0]
    rows = int(np.prod(ne[1:])) if len(ne) > 1 else 1
    blocks = np.asarray(raw, dtype=np.uint8).reshape(rows, k // 64, 36)
    d = ue4m3(blocks[..., :4])
    qs = blocks[..., 4:].reshape(rows, k // 64, 4, 8)
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)
    values = E2M1_VALUES[codes] * d[..., None]
    return values.reshape(tuple(reversed(ne)))


def dequant_modelopt(weight, weight_scale):
    """ModelOpt NVFP4: weight uint8 [N, K/2] (element 2i low nibble, 2i+1
    high), weight_scale float8_e4m3fn bytes [N, K/16] -> F32 [N, K]."""
    weight = np.asarray(weight, dtype=np.uint8)
    n, half = weight.shape
    codes = np.empty((n, 2 * half), dtype=np.uint8)
    codes[:, 0::2] = weight & 0x0F
    codes[:, 1::2] = weight >> 4
    scale = ue4m3(np.asarray(weight_scale).view(np.uint8))
    return E2M1_VALUES[codes] * np.repeat(scale, 16, axis=1)


def random_scale_bytes(rng, shape):
    """Valid UE4M3 scale bytes in a sane range, some with bit 7 set (ignored by
    convention), never the NaN patterns 0x7F / 0xFF."""
    b = rng.integers(0x20, 0x50, size=shape, dtype=np.uint8)
    flip = rng.random(shape) < 0.1
    return np.where(flip, b | 0x80, b).astype(np.uint8)


def random_nvfp4_blocks(rng, rows, k):
    """Random block_nvfp4 bytes for rows x k values: [rows, k/64 * 36]."""
    nb = k // 64
    blocks = rng.integers(0, 256, size=(rows, nb, 36), dtype=np.uint8)
    blocks[..., :4] = random_scale_bytes(rng, (rows, nb, 4))
    return blocks.reshape(rows, nb * 36)


def _find_tool():
    env = os.environ.get("NVFP4MOE_IO_TOOL")
    if env:
        return env
    found = sorted(glob.glob(str(REPO / "build*" / "tests" / "io_roundtrip_tool")), key=os.path.getmtime)
    return found[-1] if found else None


class IoTool:
    def __init__(self, path):
        self.path = path

    def run(self, *args, expect_ok=True):
        proc = subprocess.run([self.path, *map(str, args)], capture_output=True, text=True, timeout=120)
        if expect_ok and proc.returncode != 0:
            raise AssertionError(f"io_roundtrip_tool {' '.join(map(str, args))} failed ({proc.returncode}): "
                                 f"{proc.stderr}")
        return proc

    def json(self, *args):
        return json.loads(self.run(*args).stdout)


@pytest.fixture(scope="session")
def io_tool():
    path = _find_tool()
    if not path or not os.path.exists(path):
        if os.environ.get("NVFP4MOE_IO_TOOL"):
            pytest.fail(f"NVFP4MOE_IO_TOOL={path} does not exist")
        pytest.skip("io_roundtrip_tool not built (set NVFP4MOE_IO_TOOL)")
    return IoTool(path)


@pytest.fixture
def rng(request):
    """A fresh seed per test, printed so a failure can be replayed with
    NVFP4MOE_TEST_SEED=<seed>."""
    seed = int(os.environ.get("NVFP4MOE_TEST_SEED", "0")) or int.from_bytes(os.urandom(8), "little")
    print(f"[ seed ] {request.node.name} NVFP4MOE_TEST_SEED={seed}")
    return np.random.default_rng(seed)
