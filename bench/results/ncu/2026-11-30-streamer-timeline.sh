#!/usr/bin/env bash
# Experiment only (not part of the library): where a weight-streamer CTA's
# time goes. Patches a copy of the tree so every CTA writes %globaltimer at
# its phases (entry, ids checked, first copy issued, x staged, first stage
# full, K loop done, epilogue done) and its SM id; the bench dumps the last
# launch of each streamer variant (kChunks 1, 2) after its cases.
#   bench/results/ncu/2026-11-30-streamer-timeline.sh OUTDIR "bench args;bench args..."
# Its anchors follow the kernel: moved on 2026-12-01 (the K split's CTAs
# numbered over z too; the 2026-12-01 F32 timeline ran this version); the
# 2026-11-30 timelines ran its earlier version (git history).
set -u
out=$1; cases=$2; mkdir -p $out
python3 - <<'PY'
import sys; sys.path.insert(0, 'bench/results/ncu')
from source_patch import Source, prepare_tree
prepare_tree()
src = Source('.tl/src/cuda/weight_streamer.cu')
src.add_timeline('__device__ unsigned long long g_timeline[2][4096][8];\n', '#define TL_CTA (((blockIdx.z * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x) & 4095)\n' '#define TL(i) g_timeline[kChunks - 1][TL_CTA][i] = tl_now()\n')
rep = src.rep
rep('  const bool producer = warp == kThreads / 32;\n', '  const bool producer = warp == kThreads / 32;\n  if (tid == 0) { TL(0); unsigned sm; asm volatile("mov.u32 %0, %%smid;" : "=r"(sm)); g_timeline[kChunks - 1][TL_CTA][7] = sm; }\n')
rep('  if (reporter) *p.status = {kPlanOk, 0, 0, 0};\n', '  if (reporter) *p.status = {kPlanOk, 0, 0, 0};\n  if (tid == 0) TL(1);\n')
rep('    if (lane == 0) stream_weights<kChunks>(s, ring, num_stages, w0, k_blocks, all_k_blocks);\n',
    '    if (lane == 0) { TL(2); stream_weights<kChunks>(s, ring, num_stages, w0, k_blocks, all_k_blocks); }\n')
rep('  stage_b_fragments<kCols>(p, s.pair_of, num_rows, kb_begin * 64, k_blocks * 64, x_staged);\n  ptx::named_barrier_sync(kConsumerBarrier, kThreads);\n',
    '  stage_b_fragments<kCols>(p, s.pair_of, num_rows, kb_begin * 64, k_blocks * 64, x_staged);\n  ptx::named_barrier_sync(kConsumerBarrier, kThreads);\n  if (tid == 0) TL(3);\n')
rep('    ptx::mbarrier_wait_parity(&s.full[slot], ps.phase);\n', '    ptx::mbarrier_wait_parity(&s.full[slot], ps.phase);\n    if (tid == 0 && it == 0) TL(4);\n')
rep('  // 5. K partials -> tile', '  if (tid == 0) TL(5);\n  // 5. K partials -> tile')
rep('  epilogue_store<kChunks, kThreads>(p, w, s.tile, C::kTileStride, s.rows, tid);\n}',
    '  epilogue_store<kChunks, kThreads>(p, w, s.tile, C::kTileStride, s.rows, tid);\n  if (tid == 0) TL(6);\n}')
src.text += '''
namespace nvfp4moe::cuda {
void timeline_dump(const char* path) {
  static unsigned long long h[2][4096][8];
  cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(h, g_timeline, sizeof(h));
  FILE* f = std::fopen(path, "w");
  std::fprintf(f, "chunks,cta,entry,checked,copy,staged,first_full,loop_done,end,sm\\n");
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < 4096; ++i)
      if (h[c][i][0]) std::fprintf(f, "%d,%d,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu\\n", c + 1, i, h[c][i][0], h[c][i][1],
                                   h[c][i][2], h[c][i][3], h[c][i][4], h[c][i][5], h[c][i][6], h[c][i][7]);
  std::fclose(f);
  cudaMemset(g_timeline, 0, 0);
  static unsigned long long zero[2][4096][8];
  cudaMemcpyToSymbol(g_timeline, zero, sizeof(zero));
}
}  // namespace nvfp4moe::cuda
'''
rep('#include <algorithm>\n', '#include <algorithm>\n#include <cstdio>\n')
src.save()
src = Source('.tl/tools/cli_bench.cpp')
rep = src.rep
rep('int run_bench(const BenchOptions& o) {', 'int run_bench(const BenchOptions& o) {\n  struct Dump { ~Dump() { if (const char* e = std::getenv("TL_OUT")) cuda::timeline_dump(e); } } dump;')
rep('namespace nvfp4moe::cli {', 'namespace nvfp4moe::cuda { void timeline_dump(const char* path); }\nnamespace nvfp4moe::cli {')
src.save()
PY
cmake -S .tl -B build-tl -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/nvfp4moe-deps/usr -DNVFP4MOE_BENCH=OFF > /tmp/cfg-tl.log 2>&1 &&
  cmake --build build-tl --target nvfp4moe -j 16 > /tmp/b-tl.log 2>&1 || { grep -E "error" /tmp/b-tl.log | head; tail -5 /tmp/b-tl.log; }
IFS=';' read -r -a list <<< "$cases"
i=0
for c in "${list[@]}"; do
  i=$((i + 1))
  # shellcheck disable=SC2086
  TL_OUT=$out/timeline-$i.csv timeout 120 build-tl/nvfp4moe bench --device cuda $c 2>/dev/null | grep -E "^\| [a-z]" | grep -v "^| preset" > $out/bench-$i.txt
  echo "$c" > $out/case-$i.txt
done
ls -la $out
