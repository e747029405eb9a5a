// PTX wrapper: stmatrix (sm_90), warp-wide stores of 8 x 8 b16 matrices.
#pragma once

#include <cstdint>

namespace nvfp4moe::cuda::ptx {

// Four 8 x 8 b16 matrices, transposed on the way to shared memory. Matrix m
// comes from register r[m] of every lane: lane 4g + q holds its row g,
// columns 2q and 2q + 1 (the mma/wgmma accumulator layout, packed). Memory
// row j of matrix m, that is the matrix's column j (8 x 16 bits), goes to
// the 16-byte address that lane 8m + j passes.
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t row_addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                                  uint32_t r3) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(row_addr), "r"(r0),
               "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}

}  // namespace nvfp4moe::cuda::ptx
