// Experiment only: L2 read bandwidth of the GPU. Every SM reads a buffer
// that fits in L2 (ld.global.cg: L2, not L1) over and over; device events
// time the reads, median of 9. Sizes 8-32 MB, one CTA of 1024 threads per
// SM (and 2 per SM) so that enough 16-byte loads are in flight.
//   nvcc -O3 -gencode=arch=compute_90a,code=sm_90a 2026-11-30-l2-bandwidth.cu -o l2bw && ./l2bw
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>

#include "probe_timing.cuh"

__global__ void read_l2(const uint4* __restrict__ buf, size_t n, int passes, uint4* sink) {
  uint4 acc = {0, 0, 0, 0};
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (int p = 0; p < passes; ++p) {
    // Each pass starts at a different offset so that no CTA re-reads only its own slice.
    const size_t start = (size_t(blockIdx.x) * blockDim.x + threadIdx.x + size_t(p) * 7919 * 64) % n;
    for (size_t i = 0; i < n / stride; ++i) {
      size_t j = start + i * stride;
      if (j >= n) j -= n;
      uint4 v;
      asm volatile("ld.global.cg.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(buf + j));
      acc.x ^= v.x; acc.y ^= v.y; acc.z ^= v.z; acc.w ^= v.w;
    }
  }
  if (acc.x == 0x12345678u) sink[0] = acc;
}

int main() {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  uint4* sink;
  probe_check(cudaMalloc(&sink, 16), "cudaMalloc");
  for (size_t mb : {8, 16, 32}) {
    const size_t n = mb * 1024 * 1024 / 16;
    uint4* buf;
    probe_check(cudaMalloc(&buf, n * 16), "cudaMalloc");
    probe_check(cudaMemset(buf, 1, n * 16), "cudaMemset");
    for (int per_sm : {1, 2}) {
      const int grid = sms * per_sm, block = 1024 / per_sm;
      const int passes = 20;
      const float ms = probe_median_ms([&] { read_l2<<<grid, block>>>(buf, n, passes, sink); });
      const double bytes = double(n / (size_t(grid) * block)) * grid * block * 16 * passes;
      printf("{\"buffer_mb\": %zu, \"ctas_per_sm\": %d, \"median_ms\": %.4f, \"gbps\": %.0f}\n", mb, per_sm,
             ms, bytes / (ms * 1e-3) / 1e9);
    }
    probe_check(cudaFree(buf), "cudaFree");
  }
  return 0;
}
