#!/usr/bin/env bash
# Experiment only (not part of the library): where the routing plan's time
# goes. Patches a copy of the tree so that thread 0 of every plan CTA writes
# %globaltimer at the kernel's phases (entry, counted, scanned, barrier
# passed, exchange done, offsets scanned, jobs written) and every warp its end
# (max), builds it, and runs 2026-12-01-plan-timeline-probe.cu against it.
#   bench/results/ncu/2026-12-01-plan-timeline.sh OUTDIR
# The patch anchors on the plan kernel as of this file's commit; the runs at
# 4336e71 (before the new barrier) anchored on grid_barrier(plan.barrier, gen).
set -u
out=$1; mkdir -p $out
python3 - <<'PY'
import sys; sys.path.insert(0, 'bench/results/ncu')
from source_patch import Source, prepare_tree
prepare_tree()
src = Source('.tl/src/cuda/plan_kernels.cu')
src.add_timeline('__device__ unsigned long long g_plan_tl[256][10];\n', '#define TL(i) do { if (threadIdx.x == 0) g_plan_tl[blockIdx.x & 255][i] = tl_now(); } while (0)\n')
rep = src.rep
rep('  // Global loads first,', '  TL(0);\n  if (threadIdx.x == 0) { unsigned sm; asm volatile("mov.u32 %0, %%smid;" : "=r"(sm)); g_plan_tl[blockIdx.x & 255][9] = sm; }\n  // Global loads first,')
rep('  if (lane == 0 && warp_bad != INT32_MAX) atomicMin(&first_bad, warp_bad);\n  __syncthreads();\n',
    '  if (lane == 0 && warp_bad != INT32_MAX) atomicMin(&first_bad, warp_bad);\n  __syncthreads();\n  TL(1);\n')
rep('    if (tid == 0) plan.cta_first_bad[cta] = first_bad;\n', '    if (tid == 0) plan.cta_first_bad[cta] = first_bad;\n    TL(2);\n')
rep('    grid_barrier(plan.barrier, barrier_from);\n', '    grid_barrier(plan.barrier, barrier_from);\n    TL(3);\n')
rep('  __syncthreads();\n\n  if (first_bad != INT32_MAX) {', '  __syncthreads();\n  TL(4);\n\n  if (first_bad != INT32_MAX) {')
rep('  __syncthreads();\n  const uint32_t light_begin', '  __syncthreads();\n  TL(5);\n  const uint32_t light_begin')
rep('  // 5. Stable scatter', '  TL(6);\n  // 5. Stable scatter')
rep('    __syncwarp();\n  }\n}\n\nStatus launch_build_plan',
    '    __syncwarp();\n  }\n  if (lane == 0) atomicMax(&g_plan_tl[blockIdx.x & 255][7], tl_now());\n}\n\nStatus launch_build_plan')
rep('#include <cuda/atomic>\n', '#include <cuda/atomic>\n#include <cstdio>\n')
src.text += '''
namespace nvfp4moe::cuda {
void plan_timeline_dump(const char* path) {
  static unsigned long long h[256][10];
  cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(h, g_plan_tl, sizeof(h));
  FILE* f = std::fopen(path, "w");
  std::fprintf(f, "cta,entry,counted,scanned,barrier_passed,exchanged,offsets,jobs,end,sm\\n");
  for (int i = 0; i < 256; ++i)
    if (h[i][0]) std::fprintf(f, "%d,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu\\n", i, h[i][0], h[i][1], h[i][2],
                              h[i][3], h[i][4], h[i][5], h[i][6], h[i][7], h[i][9]);
  std::fclose(f);
}
}  // namespace nvfp4moe::cuda
'''
src.save()
PY
cmake -S .tl -B build-tl -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/nvfp4moe-deps/usr \
  -DNVFP4MOE_BENCH=OFF > $out/tl-cfg.log 2>&1 && cmake --build build-tl --target nvfp4moe -j 16 > $out/tl-build.log 2>&1 || { tail -20 $out/tl-build.log; exit 1; }
lib=$(find build-tl -name libnvfp4moe.a | head -1)
nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I.tl/include bench/results/ncu/2026-12-01-plan-timeline-probe.cu \
  $lib -lcublas -lcublasLt -lpthread -o build-tl/plan-probe > $out/probe-build.log 2>&1 || { tail -20 $out/probe-build.log; exit 1; }
build-tl/plan-probe $out/plan-timeline.csv | tee $out/plan-probe.txt
python3 - $out/plan-timeline.csv <<'PY' | tee -a $out/plan-probe.txt
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
t0 = min(int(r['entry']) for r in rows)
cols = ['entry', 'counted', 'scanned', 'barrier_passed', 'exchanged', 'offsets', 'jobs', 'end']
print(f"{len(rows)} CTAs; times in us after the first CTA's entry: min / median / max")
for c in cols:
    v = [(int(r[c]) - t0) / 1000 for r in rows if int(r[c])]
    if v: print(f"  {c:15s} {min(v):6.2f} {statistics.median(v):6.2f} {max(v):6.2f}")
PY
