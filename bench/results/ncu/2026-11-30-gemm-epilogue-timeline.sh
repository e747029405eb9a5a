#!/usr/bin/env bash
# Experiment only (not part of the library): where the wide GEMM's epilogue
# time goes. Patches a copy of the tree so that thread 0 of consumer
# warpgroup 0 records %globaltimer per tile: K loop done; first barrier
# passed (both warpgroups out of their loops); row table filled; pass 0 tile
# written (second barrier passed); pass 0 stored; pass 1 barrier; pass 1
# written; pass 1 stored (recorded since f12513b). Variant "nostore" also drops the global stores.
#   bench/results/ncu/2026-11-30-gemm-epilogue-timeline.sh OUTDIR "bench args;bench args..."
set -u
out=$1; cases=$2; mkdir -p $out
rm -rf /tmp/nvfp4moe-deps && mkdir -p /tmp/nvfp4moe-deps
for f in .deps/*.deb; do dpkg -x "$f" /tmp/nvfp4moe-deps; done
for v in base nostore; do
rm -rf .tl-$v && mkdir .tl-$v && cp -r CMakeLists.txt README.md bench docs fuzz include scripts src tests tools .tl-$v/
python3 - $v <<'PY'
import sys
v = sys.argv[1]
p = f'.tl-{v}/src/cuda/sm90/nvfp4_grouped_gemm.cuh'
s = open(p).read()
def rep(old, new, count=1):
    global s
    assert s.count(old) == count, (old, s.count(old))
    s = s.replace(old, new)
rep('namespace nvfp4moe::cuda::sm90 {\n',
    'namespace nvfp4moe::cuda::sm90 {\n'
    '__device__ unsigned long long g_ep[160][96][10];\n__device__ int g_ep_count[160];\n'
    '__device__ __forceinline__ unsigned long long ep_now() { unsigned long long t; '
    'asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }\n')
rep('int wg, int t, int chunks_active, PipelineState& ps) {', 'int wg, int t, int chunks_active, PipelineState& ps, int& ep_i) {')
rep('chunks_active, ps);', 'chunks_active, ps, ep_i);', 3)
rep('  PipelineState ps;\n  WorkTile w;\n  while (sched.next_tile(w)) {\n    // Chunk b',
    '  PipelineState ps;\n  WorkTile w;\n  int ep_i = 0;\n  while (sched.next_tile(w)) {\n    // Chunk b')
rep('      else mma_tile<128>(p, s, w, wg, t, chunks_active, ps, ep_i);\n    }\n  }\n',
    '      else mma_tile<128>(p, s, w, wg, t, chunks_active, ps, ep_i);\n    }\n  }\n'
    '  if (kBlockT == 128 && wg == 0 && t == 0 && blockIdx.x < 160) g_ep_count[blockIdx.x] = ep_i;\n')
rep('  __syncwarp();\n  if (lane == 0) ptx::mbarrier_arrive(&s.empty[prev_stage]);\n',
    '  __syncwarp();\n  if (lane == 0) ptx::mbarrier_arrive(&s.empty[prev_stage]);\n'
    '  unsigned long long ep[10] = {}; ep[0] = ep_now(); ep[9] = kN | (w.num_rows << 16);\n')
rep('    ptx::named_barrier_sync(1, kConsumerThreads);\n    if (b == 0) epilogue_fill_rows(p, w, s.rows, wg * 128 + t, kConsumerThreads);\n',
    '    ptx::named_barrier_sync(1, kConsumerThreads);\n    if (b < 2) ep[1 + 4 * b] = ep_now();\n'
    '    if (b == 0) epilogue_fill_rows(p, w, s.rows, wg * 128 + t, kConsumerThreads);\n    if (b == 0) ep[2] = ep_now();\n')
rep('    ptx::named_barrier_sync(1, kConsumerThreads);\n    // Pass b holds',
    '    ptx::named_barrier_sync(1, kConsumerThreads);\n    if (b < 2) ep[3 + 3 * b] = ep_now();\n    // Pass b holds')
# The epilogue's store call as at d764559, or as since 44fe8a1.
store = next(c for c in ('    epilogue_store<Config::kConsumers>(p, pass, s.tile, kStride, s.rows, wg * 128 + t, kConsumerThreads);\n',
                         '    epilogue_store<Config::kConsumers, kConsumerThreads>(p, pass, s.tile, kStride, s.rows, wg * 128 + t);\n') if c in s)
rep(store + '  }\n}',
    store +
    '    if (b < 2) ep[4 + 3 * b] = ep_now();\n  }\n'
    '  if (kBlockT == 128 && wg == 0 && t == 0 && blockIdx.x < 160 && ep_i < 96) for (int i = 0; i < 10; ++i) g_ep[blockIdx.x][ep_i][i] = ep[i];\n'
    '  ++ep_i;\n}')
s += '''
namespace nvfp4moe::cuda {
inline void gemm_epilogue_dump(const char* path) {
  static unsigned long long h[160][96][10];
  static int cnt[160];
  cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(h, sm90::g_ep, sizeof(h));
  cudaMemcpyFromSymbol(cnt, sm90::g_ep_count, sizeof(cnt));
  FILE* f = std::fopen(path, "w");
  std::fprintf(f, "cta,tile,loop_end,barrier0,rows,written0,stored0,barrier1,written1,stored1,width,rows_n\\n");
  for (int c = 0; c < 160; ++c)
    for (int i = 0; i < cnt[c] && i < 96; ++i) {
      const unsigned long long* r = h[c][i];
      std::fprintf(f, "%d,%d,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu\\n", c, i, r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[9] & 0xffff, r[9] >> 16);
    }
  std::fclose(f);
}
}  // namespace nvfp4moe::cuda
'''
s = s.replace('#include <cstdint>\n', '#include <cstdint>\n#include <cstdio>\n', 1)
open(p, 'w').write(s)
if v == 'nostore':
    p = f'.tl-{v}/src/cuda/epilogue.cuh'
    e = open(p).read()
    # The store as at d764559, or as since 44fe8a1: the value is still computed, only never stored.
    forms = [('    store4(p, row.out_row, col0 + c, v);\n', '    if (v.x == 12345.678f) store4(p, row.out_row, col0 + c, v);\n'),
             ('    store4(p, row.out_row, col,\n           finish4(p, *reinterpret_cast<const float4*>(v), reinterpret_cast<const float4*>(v + 64), row.route_w));\n',
              '    const float4 f = finish4(p, *reinterpret_cast<const float4*>(v), reinterpret_cast<const float4*>(v + 64), row.route_w);\n'
              '    if (f.x == 12345.678f) store4(p, row.out_row, col, f);\n')]
    old, new = next(f for f in forms if e.count(f[0]) == 1)
    e = e.replace(old, new)
    open(p, 'w').write(e)
p = f'.tl-{v}/src/cuda/sm90/nvfp4_grouped_gemm.cu'
open(p, 'a').write('\nnamespace nvfp4moe::cuda { void timeline_dump(const char* path) { gemm_epilogue_dump(path); } }\n')
p = f'.tl-{v}/tools/cli_bench.cpp'
s = open(p).read()
rep('int run_bench(const BenchOptions& o) {', 'int run_bench(const BenchOptions& o) {\n  struct Dump { ~Dump() { if (const char* e = std::getenv("TL_OUT")) cuda::timeline_dump(e); } } dump;')
rep('namespace nvfp4moe::cli {', 'namespace nvfp4moe::cuda { void timeline_dump(const char* path); }\nnamespace nvfp4moe::cli {')
open(p, 'w').write(s)
PY
[ "${TL_PATCH_ONLY:-0}" = 1 ] && continue
cmake -S .tl-$v -B build-tl-$v -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/nvfp4moe-deps/usr -DNVFP4MOE_BENCH=OFF > /tmp/cfg-tl.log 2>&1 &&
  cmake --build build-tl-$v --target nvfp4moe -j 16 > /tmp/b-tl.log 2>&1 || { grep -E "error" /tmp/b-tl.log | head; tail -5 /tmp/b-tl.log; }
done
[ "${TL_PATCH_ONLY:-0}" = 1 ] && exit 0
IFS=';' read -r -a list <<< "$cases"
for v in base nostore; do
  i=0
  for c in "${list[@]}"; do
    i=$((i + 1))
    # shellcheck disable=SC2086
    TL_OUT=$out/$v-$i.csv timeout 120 build-tl-$v/nvfp4moe bench --device cuda $c 2>/dev/null | grep -E "^\| [a-z]" | grep -v "^| preset" > $out/bench-$v-$i.txt
    echo "$c" > $out/case-$i.txt
  done
done
ls -la $out
