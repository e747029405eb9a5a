#!/usr/bin/env bash
# Experiment only (not part of the library): which part of the wide GEMM's
# epilogue costs the 13-40% that removing all of it gains end to end
# (2026-11-30-ablation-epilogue-remainder.sh). Builds this tree (tag "base")
# and four copies with parts of mma_tile's F32 epilogue switched off by a
# runtime condition that is never true (p.n < 0), so the code stays in the
# kernel and only its execution goes:
#   nogst:  the store loop runs but never writes global memory
#           (as the "nostore" epilogue timeline);
#   noloop: no store loop (barriers, row table, shared-memory tile remain);
#   notile: no store loop, no shared-memory tile (barriers, row table remain);
#   none:   mma_tile returns after its K loop, as the earlier ablation.
# Outputs of every copy but "base" are not valid. Times the same bench cases,
# alternating, in 2026-11-30-ab.sh's line format with these tags.
#   bench/results/ncu/2026-11-30-epilogue-parts.sh OUTDIR "bench args;bench args..."
set -u
out=$1; cases=$2; mkdir -p $out
rm -rf /tmp/nvfp4moe-deps && mkdir -p /tmp/nvfp4moe-deps
for f in .deps/*.deb; do dpkg -x "$f" /tmp/nvfp4moe-deps; done
variants="nogst noloop notile none"
for v in $variants; do
  rm -rf .ep-$v && mkdir .ep-$v && cp -r CMakeLists.txt README.md bench docs fuzz include scripts src tests tools .ep-$v/
done
python3 - <<'PY'
# Each part is patched in the F32 path's code as it reads at 0e0a748 or,
# from f1d2c61 on (F32 path in its own branch, tile.f32), as it reads there.
def patch(path, *alternatives):
    s = open(path).read()
    for old, new in alternatives:
        if s.count(old) == 1:
            open(path, 'w').write(s.replace(old, new))
            return
    raise SystemExit(f"{path}: none of the patterns matches once: {[a[0] for a in alternatives]}")
g = 'src/cuda/sm90/nvfp4_grouped_gemm.cuh'
e = 'src/cuda/epilogue.cuh'
def forms(pad, tile):
    store = f'{pad}epilogue_store<Config::kConsumers, kConsumerThreads>(p, pass, {tile}, kStride, s.rows, wg * 128 + t);\n'
    fill = f'{pad}if (b == 0) epilogue_fill_rows(p, w, s.rows, wg * 128 + t, kConsumerThreads);\n'
    return ((store, store.replace('epilogue_store', 'if (p.n < 0) epilogue_store', 1)),
            (fill + f'{pad}if (b < chunks_active) {{\n', fill + f'{pad}if (b < chunks_active && p.n < 0) {{\n'))
(store0, tile0), (store1, tile1) = forms('    ', 's.tile'), forms('      ', 's.tile.f32')
patch('.ep-nogst/' + e,
      ('    store4(p, row.out_row, col,\n           finish4(p, *reinterpret_cast<const float4*>(v), reinterpret_cast<const float4*>(v + 64), row.route_w));\n',
       '    const float4 f = finish4(p, *reinterpret_cast<const float4*>(v), reinterpret_cast<const float4*>(v + 64), row.route_w);\n'
       '    if (p.n < 0) store4(p, row.out_row, col, f);\n'
       '    else asm volatile("" :: "f"(f.x), "f"(f.y), "f"(f.z), "f"(f.w));\n'))
patch('.ep-noloop/' + g, store0, store1)
patch('.ep-notile/' + g, store0, store1)
patch('.ep-notile/' + g, tile0, tile1)
split_k = '  // Split K: raw partial sums; the reduction applies alpha once, in order.\n'
patch('.ep-none/' + g, (split_k, '  if (p.n > 0) return;  // ablation: no epilogue\n' + split_k))
PY
build() {
  cmake -S $1 -B $2 -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/nvfp4moe-deps/usr \
    -DNVFP4MOE_BENCH=OFF > /tmp/cfg-$3.log 2>&1 && cmake --build $2 --target nvfp4moe -j 4 > /tmp/b-$3.log 2>&1 || tail -5 /tmp/b-$3.log
}
for v in $variants; do build .ep-$v build-ep-$v $v & done
[ -x build-ep-base/nvfp4moe ] || build . build-ep-base base &
wait
IFS=';' read -r -a list <<< "$cases"
for rep in $(seq ${AB_REPS:-2}); do
  for b in base $variants; do
    for c in "${list[@]}"; do
      # shellcheck disable=SC2086
      timeout 120 build-ep-$b/nvfp4moe bench --device cuda $c 2>/dev/null | grep -E "^\| [a-z]" | grep -v "^| preset" |
        awk -F'|' -v tag="$b" '{printf "%-6s %s %s T=%s %s %s %s us\n", tag, $2, $3, $4, $5, $6, $7}' | tee -a $out/ab.txt
    done
  done
done
nvidia-smi --query-gpu=name,clocks.sm --format=csv >> $out/ab.txt
