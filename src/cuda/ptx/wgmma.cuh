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

// The same descriptor, marked warp-uniform for ptxas: the start address goes
// through a shuffle from lane 0 (every lane holds the same value) and the
// constant high word stays a constant. NOTES: without it ptxas builds each
// wgmma's descriptor in vector registers and moves both words to uniform
// ones (a lop3, an IMAD move of the high word and two R2UR per wgmma, 16
// instructions per fragment step); with it, one shuffle, one R2UR and
// uniform-pipe adds for the k16 offsets (SASS: the narrow tile's step 112 ->
// 105 instructions, the medium tile's 107 -> 97). The warp must be converged.
__device__ __forceinline__ uint64_t smem_desc_kmajor_sw128_uniform(const void* tile) {
  const uint64_t desc = smem_desc_kmajor_sw128(tile);
  return (desc & 0xFFFFFFFF00000000ull) | __shfl_sync(0xFFFFFFFFu, uint32_t(desc), 0);
}

}  // namespace nvfp4moe::cuda::ptx
