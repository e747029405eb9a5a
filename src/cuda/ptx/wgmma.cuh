// PTX wrappers: wgmma ordering (fence, commit, wait) and shared-memory matrix
// descriptors. The mma instructions themselves are in wgmma_rs.cuh.
#pragma once

#include <cstdint>

#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/wgmma_rs.cuh"

namespace nvfp4moe::cuda::ptx {

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit_group() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait_group() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// NOTES: accumulator registers are written asynchronously by wgmma; this
// tells the compiler they may change until the wait, so it keeps them live.
template <int N>
__device__ __forceinline__ void wgmma_fence_operands(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void wgmma_fence_operands(uint32_t (&a)[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) asm volatile("" : "+r"(a[i])::"memory");
}

// Descriptor of a K-major operand tile whose rows are 128 bytes (64 BF16) and
// stored with the 128-byte swizzle: 16-byte chunk c of row r sits at chunk
// c ^ (r % 8). Groups of 8 rows are 1024 bytes apart. The tile base must be
// 1024-byte aligned; stepping k16 inside a row adds 32 bytes to the start.
__device__ __forceinline__ uint64_t smem_desc_kmajor_sw128(const void* tile) {
  const uint64_t addr = smem_addr(tile);
  uint64_t desc = (addr & 0x3FFFF) >> 4;  // start address
  desc |= uint64_t(1) << 16;              // leading byte offset (unused with swizzle)
  desc |= uint64_t(1024 >> 4) << 32;      // stride byte offset: 8 rows x 128 B
  desc |= uint64_t(1) << 62;              // 128-byte swizzle
  return desc;
}

}  // namespace nvfp4moe::cuda::ptx
