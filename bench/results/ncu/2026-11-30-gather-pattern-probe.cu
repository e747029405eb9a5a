// Experiment only: L2 read bandwidth of row gathers by the shape of a warp
// instruction. x is 2048 rows of 4 KB (8 MB, L2-resident); each warp
// instruction reads 16 bytes per lane from 32 / L rows, L lanes per row
// (L = 2: sixteen rows, 32 bytes of each, as the wide GEMM's producer did at
// 4207b16; L = 8: four whole 128-byte lines). Rows are drawn by a hash, as a
// routing's permutation would. Every SM, 1024 threads; device events,
// median of 9.
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a 2026-11-30-gather-pattern-probe.cu -o gp && ./gp
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "probe_timing.cuh"

constexpr int kRows = 2048, kRowBytes = 4096;

template <int L>
__global__ void gather(const char* __restrict__ x, int iters, uint4* sink) {
  const int lane = threadIdx.x % 32, gw = (blockIdx.x * blockDim.x + threadIdx.x) / 32;
  uint4 acc = {0, 0, 0, 0};
  for (int i = 0; i < iters; ++i) {
    const uint32_t h = (uint32_t(gw) * 2654435761u) ^ (uint32_t(i) * 40503u) ^ uint32_t(lane / L) * 2246822519u;
    const int row = (h >> 7) % kRows;
    const int col = ((h >> 3) % (kRowBytes / (16 * L))) * 16 * L + (lane % L) * 16;
    uint4 v;
    asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(x + size_t(row) * kRowBytes + col));
    acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
  }
  if (acc.x == 0x12345678u) sink[0] = acc;
}

template <int L>
void run(const char* x, uint4* sink, int sms) {
  const int iters = 256;
  const float ms = probe_median_ms([&] { gather<L><<<sms, 1024>>>(x, iters, sink); });
  const double bytes = double(sms) * 1024 * 16 * iters;
  printf("{\"lanes_per_row\": %d, \"rows_per_instruction\": %d, \"median_ms\": %.4f, \"gbps\": %.0f}\n", L, 32 / L,
         ms, bytes / (ms * 1e-3) / 1e9);
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  char* x;
  uint4* sink;
  probe_check(cudaMalloc(&x, size_t(kRows) * kRowBytes), "cudaMalloc");
  probe_check(cudaMemset(x, 1, size_t(kRows) * kRowBytes), "cudaMemset");
  probe_check(cudaMalloc(&sink, 16), "cudaMalloc");
  run<2>(x, sink, sms);
  run<4>(x, sink, sms);
  run<8>(x, sink, sms);
  return 0;
}
