// PTX wrappers: warp-level mma.sync (sm_80+) and the F32 -> BF16 pack it feeds.
#pragma once

#include <cstdint>

namespace nvfp4moe::cuda::ptx {

// D = A * B + D, m16n8k16, BF16 inputs, F32 accumulators. Fragments (lane =
// 4g + q): a = {(g, 2q..), (g+8, 2q..), (g, 2q+8..), (g+8, 2q+8..)};
// b = {k 2q..2q+1, k 2q+8..2q+9} of column g; d = {(g, 2q), (g, 2q+1),
// (g+8, 2q), (g+8, 2q+1)}. The A layout is one warp's share of the wgmma
// m64 A fragment, so the sm90 packed weights feed both.
__device__ __forceinline__ void mma_m16n8k16_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// bf16x2 {lo, hi}, each rounded to nearest even: the same rounding as the
// F32 -> BF16 activation conversion, so both input dtypes meet the same bits.
__device__ __forceinline__ uint32_t pack_bf16x2_rn(float lo, float hi) {
  uint32_t d;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
  return d;
}

}  // namespace nvfp4moe::cuda::ptx
