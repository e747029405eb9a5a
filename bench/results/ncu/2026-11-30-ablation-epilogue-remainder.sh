#!/usr/bin/env bash
# Experiment only (not part of the library): what the wide GEMM's epilogue
# and its remainder tiles cost end to end. Builds this tree three times:
#   base: unchanged;
#   mid:  "no epilogue": mma_tile returns after its K loop (no row table,
#         no shared-memory tile, no stores);
#   new:  "no remainder MMA": tiles of at most 32 rows run the K loop of a
#         warpgroup whose chunks are past N (stage bookkeeping only), then
#         the epilogue.
# and times the same bench cases, alternating, in the 2026-11-30-ab.sh line
# format (tags base/mid/new), so bench/results/ncu/ab2json.py reads it.
#   bench/results/ncu/2026-11-30-ablation-epilogue-remainder.sh OUTDIR "bench args;bench args..."
set -u
out=$1; cases=$2; mkdir -p $out
rm -rf /tmp/nvfp4moe-deps && mkdir -p /tmp/nvfp4moe-deps
for f in .deps/*.deb; do dpkg -x "$f" /tmp/nvfp4moe-deps; done
for v in mid new; do
  rm -rf .abl-$v && mkdir .abl-$v && cp -r CMakeLists.txt README.md bench docs fuzz include scripts src tests tools .abl-$v/
done
python3 - <<'PY'
def patch(path, old, new):
    s = open(path).read()
    assert s.count(old) == 1, (path, old)
    open(path, 'w').write(s.replace(old, new))
g = 'src/cuda/sm90/nvfp4_grouped_gemm.cuh'
patch('.abl-mid/' + g, '  constexpr int kStride = SharedStorage<kBlockT>::kTileStride;\n',
      '  if (p.n > 0) return;  // ablation: no epilogue\n  constexpr int kStride = SharedStorage<kBlockT>::kTileStride;\n')
patch('.abl-new/' + g, '      mma_tile<32>(p, s, w, wg, t, chunks_active, ps);\n',
      '      mma_tile<32>(p, s, w, wg, t, kBlockT >= 128 ? 0 : chunks_active, ps);  // ablation\n')
PY
build() {
  cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/nvfp4moe-deps/usr \
    -DNVFP4MOE_BENCH=OFF > /tmp/cfg-$3.log 2>&1 && cmake --build $2 --target nvfp4moe -j 5 > /tmp/b-$3.log 2>&1 || tail -5 /tmp/b-$3.log
}
build . build-abl-base base & build .abl-mid build-abl-mid mid & build .abl-new build-abl-new new & wait
IFS=';' read -r -a list <<< "$cases"
for rep in $(seq ${AB_REPS:-2}); do
  for b in base mid new; do
    for c in "${list[@]}"; do
      # shellcheck disable=SC2086
      timeout 120 build-abl-$b/nvfp4moe bench --device cuda $c 2>/dev/null | grep -E "^\| [a-z]" | grep -v "^| preset" |
        awk -F'|' -v tag="$b" '{printf "%-4s %s %s T=%s %s %s %s us\n", tag, $2, $3, $4, $5, $6, $7}' | tee -a $out/ab.txt
    done
  done
done
nvidia-smi --query-gpu=name,clocks.sm --format=csv >> $out/ab.txt
