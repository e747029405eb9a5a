#!/usr/bin/env bash
# Experiment only (not part of the library): where the sm90 grouped GEMM's
# time goes, tile by tile. Patches a copy of the tree so that thread 0 of
# each consumer warpgroup records, per tile: %globaltimer at the tile's start,
# at the end of its K loop and at the end of its epilogue; its wgmma width,
# rows, K blocks and chunks; and clock64 cycles spent (a) waiting for full
# stages, (b) from the stage being full to the dequantized fragment in
# registers (fragment loads + dequant), (c) in the wgmma fence, issue and
# commit, (d) in wgmma_wait<1>.
# The producer's thread 0 records the cycles it waited for empty stages and
# its total cycles. The bench dumps the last launch of each kernel variant.
#   bench/results/ncu/2026-11-30-gemm-timeline.sh OUTDIR "bench args;bench args..."
set -u
out=$1; cases=$2; mkdir -p $out
rm -rf /tmp/nvfp4moe-deps && mkdir -p /tmp/nvfp4moe-deps
for f in .deps/*.deb; do dpkg -x "$f" /tmp/nvfp4moe-deps; done
rm -rf .tl && mkdir .tl && cp -r CMakeLists.txt README.md bench docs fuzz include scripts src tests tools .tl/
python3 - <<'PY'
p = '.tl/src/cuda/sm90/nvfp4_grouped_gemm.cuh'
s = open(p).read()
def rep(old, new, count=1):
    global s
    assert s.count(old) == count, (old, s.count(old))
    s = s.replace(old, new)
rep('namespace nvfp4moe::cuda::sm90 {\n',
    'namespace nvfp4moe::cuda::sm90 {\n'
    '// [kernel: 0 narrow, 1 wide][wg][cta][tile][field]\n'
    '__device__ unsigned long long g_tl[2][4][160][96][8];\n'
    '__device__ int g_tl_count[2][4][160];\n'
    '__device__ unsigned long long g_tl_prod[2][160][6];\n'
    '__device__ __forceinline__ unsigned long long tl_now() { unsigned long long t; '
    'asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }\n'
    '__device__ __forceinline__ long long tl_clk() { long long t; asm volatile("mov.u64 %0, %%clock64;" : "=l"(t)); return t; }\n')
# producer: empty waits
rep('  PipelineState ps;\n  WorkTile w;\n  while (sched.next_tile(w)) {\n    const uint16_t* src[',
    '  PipelineState ps;\n  WorkTile w;\n  long long tl_c0 = tl_clk(), tl_empty = 0; unsigned long long tl_n0 = tl_now();\n'
    '  while (sched.next_tile(w)) {\n    const uint16_t* src[')
rep('      ptx::mbarrier_wait_parity(&s.empty[ps.stage], ps.phase ^ 1);\n',
    '      { long long c = tl_clk(); ptx::mbarrier_wait_parity(&s.empty[ps.stage], ps.phase ^ 1); tl_empty += tl_clk() - c; }\n')
rep('  ptx::cp_async_wait_all();  // no copy may outlive its issuing thread\n}',
    '  ptx::cp_async_wait_all();  // no copy may outlive its issuing thread\n'
    '  if (t == 0 && blockIdx.x < 160) { auto* r = g_tl_prod[kBlockT == 128][blockIdx.x]; r[0] = tl_empty; r[1] = tl_clk() - tl_c0; '
    'r[2] = tl_n0; r[3] = tl_now(); unsigned sm; asm volatile("mov.u32 %0, %%smid;" : "=r"(sm)); r[4] = sm; }\n}')
# consumer: per-tile records
rep('int wg, int t, int chunks_active, PipelineState& ps) {',
    'int wg, int t, int chunks_active, PipelineState& ps, int& tl_i) {')
rep('  int prev_stage = -1;\n',
    '  int prev_stage = -1;\n  const unsigned long long tl_t0 = tl_now(); unsigned long long tl_le = 0;\n'
    '  long long tl_full = 0, tl_deq = 0, tl_mma = 0, tl_iss = 0;\n')
rep('      if (b == 0) ptx::mbarrier_wait_parity(&s.full[ps.stage], ps.phase);\n',
    '      const long long tl_a = tl_clk();\n'
    '      if (b == 0) ptx::mbarrier_wait_parity(&s.full[ps.stage], ps.phase);\n'
    '      const long long tl_b = tl_clk(); tl_full += tl_b - tl_a;\n')
rep('      const uint64_t desc = ptx::smem_desc_kmajor_sw128(st.x);\n      ptx::wgmma_fence();\n',
    '      const uint64_t desc = ptx::smem_desc_kmajor_sw128(st.x);\n'
    '      asm volatile("" : "+r"(abuf[0][0]), "+r"(abuf[0][1]), "+r"(abuf[0][2]), "+r"(abuf[0][3]), "+r"(abuf[1][0]), "+r"(abuf[1][1]), "+r"(abuf[1][2]), "+r"(abuf[1][3]), '
    '"+r"(abuf[2][0]), "+r"(abuf[2][1]), "+r"(abuf[2][2]), "+r"(abuf[2][3]), "+r"(abuf[3][0]), "+r"(abuf[3][1]), "+r"(abuf[3][2]), "+r"(abuf[3][3]));\n'
    '      const long long tl_d = tl_clk(); tl_deq += tl_d - tl_b;\n      ptx::wgmma_fence();\n')
rep('      ptx::wgmma_commit_group();\n      ptx::wgmma_wait_group<1>();\n',
    '      ptx::wgmma_commit_group();\n      const long long tl_c = tl_clk(); tl_iss += tl_c - tl_d;\n'
    '      ptx::wgmma_wait_group<1>();\n      tl_mma += tl_clk() - tl_c;\n')
rep('    for (int b = 0; b < kBlocks; ++b) ptx::wgmma_fence_operands(acc[b]);\n  } else {',
    '    for (int b = 0; b < kBlocks; ++b) ptx::wgmma_fence_operands(acc[b]);\n    tl_le = tl_now();\n  } else {')
# The epilogue's store call as at 29a93ba, or as since 44fe8a1.
store = next(c for c in ('    epilogue_store<Config::kConsumers>(p, pass, s.tile, kStride, s.rows, wg * 128 + t, kConsumerThreads);\n',
                         '    epilogue_store<Config::kConsumers, kConsumerThreads>(p, pass, s.tile, kStride, s.rows, wg * 128 + t);\n') if c in s)
rep(store + '  }\n}',
    store + '  }\n'
    '  if (t == 0 && blockIdx.x < 160 && tl_i < 96) { auto* r = g_tl[kBlockT == 128][wg][blockIdx.x][tl_i];\n'
    '    r[0] = tl_t0; r[1] = tl_le; r[2] = tl_now(); r[3] = kN | (w.num_rows << 16) | (uint64_t(w.expert) << 32);\n'
    '    r[4] = (w.k_end - w.k_begin) | (chunks_active << 16) | (uint64_t(w.n_tile) << 32); r[5] = tl_full; r[6] = tl_deq; r[7] = tl_mma | (uint64_t(tl_iss) << 40); }\n'
    '  ++tl_i;\n}')
rep('  PipelineState ps;\n  WorkTile w;\n  while (sched.next_tile(w)) {\n    // Chunk b',
    '  PipelineState ps;\n  WorkTile w;\n  int tl_i = 0;\n  while (sched.next_tile(w)) {\n    // Chunk b')
rep('chunks_active, ps);', 'chunks_active, ps, tl_i);', 3)
rep('      else mma_tile<128>(p, s, w, wg, t, chunks_active, ps, tl_i);\n    }\n  }\n}',
    '      else mma_tile<128>(p, s, w, wg, t, chunks_active, ps, tl_i);\n    }\n  }\n'
    '  if (t == 0 && blockIdx.x < 160) g_tl_count[kBlockT == 128][wg][blockIdx.x] = tl_i;\n}')
s += '''
namespace nvfp4moe::cuda {
inline void gemm_timeline_dump(const char* path) {
  static unsigned long long h[2][4][160][96][8];
  static int cnt[2][4][160];
  static unsigned long long prod[2][160][6];
  cudaDeviceSynchronize();
  cudaMemcpyFromSymbol(h, sm90::g_tl, sizeof(h));
  cudaMemcpyFromSymbol(cnt, sm90::g_tl_count, sizeof(cnt));
  cudaMemcpyFromSymbol(prod, sm90::g_tl_prod, sizeof(prod));
  FILE* f = std::fopen(path, "w");
  std::fprintf(f, "kind,kernel,wg,cta,tile,start,loop_end,end,width,rows,expert,kblocks,chunks,n_tile,full_cyc,deq_cyc,mma_cyc,issue_cyc\\n");
  for (int k = 0; k < 2; ++k)
    for (int c = 0; c < 160; ++c) {
      if (prod[k][c][1]) std::fprintf(f, "prod,%d,0,%d,0,%llu,0,%llu,%llu,0,0,0,0,0,%llu,%llu,0,0\\n", k, c, prod[k][c][2], prod[k][c][3], prod[k][c][4], prod[k][c][0], prod[k][c][1]);
      for (int wg = 0; wg < 4; ++wg)
        for (int i = 0; i < cnt[k][wg][c] && i < 96; ++i) {
          const unsigned long long* r = h[k][wg][c][i];
          std::fprintf(f, "tile,%d,%d,%d,%d,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu,%llu\\n", k, wg, c, i, r[0], r[1], r[2],
                       r[3] & 0xffff, (r[3] >> 16) & 0xffff, r[3] >> 32, r[4] & 0xffff, (r[4] >> 16) & 0xffff, r[4] >> 32,
                       r[5], r[6], r[7] & ((1ull << 40) - 1), r[7] >> 40);
        }
    }
  std::fclose(f);
  static unsigned long long zh[2][4][160][96][8];
  static int zc[2][4][160];
  static unsigned long long zp[2][160][6];
  cudaMemcpyToSymbol(sm90::g_tl, zh, sizeof(zh));
  cudaMemcpyToSymbol(sm90::g_tl_count, zc, sizeof(zc));
  cudaMemcpyToSymbol(sm90::g_tl_prod, zp, sizeof(zp));
}
}  // namespace nvfp4moe::cuda
'''
s = s.replace('#include <cstdint>\n', '#include <cstdint>\n#include <cstdio>\n', 1)
open(p, 'w').write(s)
p = '.tl/src/cuda/sm90/nvfp4_grouped_gemm.cu'
s = open(p).read()
s += '\nnamespace nvfp4moe::cuda { void timeline_dump(const char* path) { gemm_timeline_dump(path); } }\n'
open(p, 'w').write(s)
p = '.tl/tools/cli_bench.cpp'
s = open(p).read()
rep('int run_bench(const BenchOptions& o) {', 'int run_bench(const BenchOptions& o) {\n  struct Dump { ~Dump() { if (const char* e = std::getenv("TL_OUT")) cuda::timeline_dump(e); } } dump;')
rep('namespace nvfp4moe::cli {', 'namespace nvfp4moe::cuda { void timeline_dump(const char* path); }\nnamespace nvfp4moe::cli {')
open(p, 'w').write(s)
PY
[ "${TL_PATCH_ONLY:-0}" = 1 ] && exit 0
cmake -S .tl -B build-tl -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH=/tmp/nvfp4moe-deps/usr -DNVFP4MOE_BENCH=OFF > /tmp/cfg-tl.log 2>&1 &&
  cmake --build build-tl --target nvfp4moe -j 16 > /tmp/b-tl.log 2>&1 || { grep -E "error" /tmp/b-tl.log | head; tail -5 /tmp/b-tl.log; }
grep -E "C75[0-9][0-9]" /tmp/b-tl.log | sort | uniq | head
IFS=';' read -r -a list <<< "$cases"
i=0
for c in "${list[@]}"; do
  i=$((i + 1))
  # shellcheck disable=SC2086
  TL_OUT=$out/timeline-$i.csv timeout 120 build-tl/nvfp4moe bench --device cuda $c 2>/dev/null | grep -E "^\| [a-z]" | grep -v "^| preset" > $out/bench-$i.txt
  echo "$c" > $out/case-$i.txt
done
ls -la $out
