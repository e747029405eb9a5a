// NVFP4 -> BF16 in registers, shared by every mainloop that feeds tensor
// cores from the sm90 packed layout (format/sm90_fragment.hpp).
#pragma once

#include <cstdint>

#include "cuda/ptx/sync.cuh"
#include "format/sm90_fragment.hpp"
#include "nvfp4moe/layout.hpp"

namespace nvfp4moe::cuda {

// The mainloop folds 2^-10 into every weight so that the scale factor
// S * 2^116 fits BF16 (S <= 448); the epilogue multiplies it back, exactly.
inline constexpr float kWeightDownscale = 1024.0f;

// An operand ptxas cannot see as a power of two: with an immediate 16 it
// emits LEA on the integer ALU, the pipe the code placement keeps busiest
// (ncu at 3509a68); x * kScaleCodeMul + bias is an IMAD on the FMA pipe
// (A/B at 00bf211: +1-3% on narrow GEMM tiles).
// A caller whose loop has registers to spare passes a copy read from shared
// memory before the loop: ptxas re-loads a constant-bank value (LDC) before
// its uses inside the loop, even through an inline-asm move or a shuffle,
// and the IMAD then waits for it (ncu of the streamer at 8f96f7e: 9.5% of
// stall samples on that IMAD).
static __constant__ uint32_t kScaleCodeMul = 16;

// bf16x2 {S(g) * 2^116, S(g + 8) * 2^116} for k16 step `step` of a
// thread's scale word (sm90_fragment.hpp: bytes step % 2 and 2 + step % 2
// hold rows g and g + 8): the prmt puts each code in the low byte of its
// half, the multiply-add makes each half's bf16 bits. mul: kScaleCodeMul.
// One factor pair per step, each half broadcast by the multiply that uses
// it (mul_bf16x2_by_lo/hi), instead of a replicated factor per row: two
// instructions per step fewer.
__device__ __forceinline__ uint32_t scale_pair_bf16x2(uint32_t scale_word, int step, uint32_t mul) {
  const uint32_t codes = ptx::prmt(scale_word, 0u, step % 2 == 0 ? 0x4240u : 0x4341u);
  return codes * mul + (sm90::kScaleCodeBias | sm90::kScaleCodeBias << 16);
}

// One k16 step of a thread's A fragment: 8 E2M1 codes -> 4 bf16x2 registers,
// rows g (p0, p2) and g + 8 (p1, p3) each multiplied by their scale factor
// (the low and the high half of f).
// Exact: e2m1 * S * 2^-10 has at most 6 significant bits and stays in BF16's
// normal range.
__device__ __forceinline__ void dequant_e2m1x8_bf16(uint32_t word, uint32_t f, uint32_t (&a)[4]) {
  a[0] = ptx::mul_bf16x2_by_lo(sm90::pair_bf16x2_bits(word, 0), f);
  a[1] = ptx::mul_bf16x2_by_hi(sm90::pair_bf16x2_bits(word, 1), f);
  a[2] = ptx::mul_bf16x2_by_lo(sm90::pair_bf16x2_bits(word, 2), f);
  a[3] = ptx::mul_bf16x2_by_hi(sm90::pair_bf16x2_bits(word, 3), f);
}

// Where thread t (0..127, i.e. warp t / 32 of the 64-row chunk's four) finds
// its k64 fragment inside a 2304-byte chunk: 16 code bytes, then the 8
// scale codes of its row pair (g, g + 8). Shared memory or global memory.
struct FragmentRef {
  const uint8_t* codes;
  const uint8_t* scales;
};
__device__ __forceinline__ FragmentRef fragment_ref(const uint8_t* chunk, int t) {
  const int warp = t / 32, g = (t % 32) / 4;
  return {chunk + t * 16, chunk + kSm90ChunkCodeBytes + (warp * 8 + g) * 8};
}

// The thread's whole k64 fragment: four k16 steps of A registers. mul:
// kScaleCodeMul, or a copy of it (above).
__device__ __forceinline__ void dequant_fragment(const uint4& codes, const uint2& scales, uint32_t mul,
                                                 uint32_t (&a)[4][4]) {
  const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
#pragma unroll
  for (int step = 0; step < 4; ++step) {
    dequant_e2m1x8_bf16(words[step], scale_pair_bf16x2(step < 2 ? scales.x : scales.y, step, mul), a[step]);
  }
}

}  // namespace nvfp4moe::cuda
