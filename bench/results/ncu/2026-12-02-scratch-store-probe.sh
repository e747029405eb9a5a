#!/usr/bin/env bash
# Experiment only (not part of the library): writes .mid/, a copy of the
# commit named by $1 whose MUL_MAT_ID BF16 rows epilogue (256-row tiles)
# stores every tile's rows into a 16 MB window of y instead of their output
# rows: row (CTA mod 256) * 128 + tile row, the tile's 256 columns, so the
# same store instructions write the same bytes per tile to lines that stay in
# L2 (no DRAM write-back, no L2 lines taken from the weights and
# activations). Outputs invalid; cases whose y is under 16 MB keep the real
# stores. Against the ablation without the store loop (1.13x on qwen3 down at
# T = 2048, ...-7a2b6a4-ablation-bf16-rows-epilogue.json) it says whether the
# rows cost through DRAM and L2 capacity (this build as fast as the ablation)
# or through the SM's own store path (as slow as the base). perf.md Next 9.
#   bench/results/ncu/2026-12-02-scratch-store-probe.sh COMMIT
set -eu
rm -rf .mid && mkdir .mid
git archive "$1" -- . ':!bench/results' | tar -x -C .mid
python3 - <<'PY'
p = '.mid/src/cuda/epilogue.cuh'
s = open(p).read()
old = ('    *reinterpret_cast<uint4*>(y + rows[tr].out_row * p.y_stride) =\n'
       '        *reinterpret_cast<const uint4*>(src + tr * tile_stride);\n')
new = ('    *reinterpret_cast<uint4*>(scratch ? window + tr * 256 : y + rows[tr].out_row * p.y_stride) =\n'
       '        *reinterpret_cast<const uint4*>(src + tr * tile_stride);\n')
assert s.count(old) == 1, "the BF16 rows store moved: update the patch"
s = s.replace(old, new)
anchor = '  auto* y = static_cast<uint16_t*>(p.y) + col;\n'
assert s.count(anchor) == 1
s = s.replace(anchor, anchor +
    '  const bool scratch = kTileRows == 256 && int64_t(p.num_tokens) * p.top_k * p.y_stride >= int64_t(256) * 128 * 256;\n'
    '  uint16_t* window = static_cast<uint16_t*>(p.y) + int64_t(blockIdx.x % 256) * 128 * 256 + piece * 8;\n')
open(p, 'w').write(s)
PY
echo ".mid: $1 with the scratch-window BF16 row stores"
