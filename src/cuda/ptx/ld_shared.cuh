// PTX wrappers: shared-memory loads by 32-bit shared-window address.
#pragma once

#include <cstdint>

namespace nvfp4moe::cuda::ptx {

// volatile and "memory": the loads must stay behind the mbarrier wait that
// makes their bytes visible, which the compiler only sees as another asm.
__device__ __forceinline__ uint4 ld_shared_v4(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(addr)
               : "memory");
  return v;
}

__device__ __forceinline__ uint2 ld_shared_v2(uint32_t addr) {
  uint2 v;
  asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(addr) : "memory");
  return v;
}

// Four 8 x 8 b16 matrices: lane 8m + j passes the 16-byte address of row j
// of matrix m, and lane 4g + q receives row g, columns 2q and 2q + 1 of
// matrix m in r[m] (an mma B fragment where the rows are n and the columns
// k).
__device__ __forceinline__ uint4 ldmatrix_x4(uint32_t row_addr) {
  uint4 v;
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "r"(row_addr)
               : "memory");
  return v;
}

}  // namespace nvfp4moe::cuda::ptx
