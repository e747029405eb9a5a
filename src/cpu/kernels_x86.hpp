// x86 pieces shared by the AVX2 and AVX-512 kernels (both include this
// file; everything here is compiled for AVX2 + FMA, which AVX-512 code may
// call and inline).
#pragma once

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define NVFP4MOE_HAVE_X86_KERNELS 1

#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "cpu/kernels.hpp"
#include "nvfp4moe/format.hpp"

#define NVFP4MOE_AVX2 __attribute__((target("avx2,fma")))
#define NVFP4MOE_AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) inline

namespace nvfp4moe::cpu::x86 {

// The decoders multiply an E2M1 value by its block scale, both carried with
// an exponent offset that cancels exactly: the code as e2m1 * 2^120 (from
// these byte tables) and the scale as ue4m3 * 2^-120 (which is the scale
// byte's bits shifted into F32 position, see convert_scales). Every factor
// and the product are exact, so w = e2m1 * ue4m3 bit for bit.
inline constexpr int kScaleExponentOffset = 120;

struct ByteTables {
  alignas(32) uint8_t high[32];  // bits 15..8 of the BF16 pattern of e2m1(c) * 2^120, twice (one per 128-bit lane)
  alignas(32) uint8_t low[32];   // bits 7..0
};

inline const ByteTables& bf16_byte_tables() {
  static const ByteTables tables = [] {
    ByteTables t{};
    for (int c = 0; c < 16; ++c) {
      // E2M1 values have 2 significant bits: the F32 pattern is a BF16 one.
      const float v = std::ldexp(e2m1_to_float(static_cast<uint8_t>(c)), kScaleExponentOffset);
      const uint32_t bits = std::bit_cast<uint32_t>(v);
      t.high[c] = t.high[c + 16] = static_cast<uint8_t>(bits >> 24);
      t.low[c] = t.low[c + 16] = static_cast<uint8_t>(bits >> 16);
    }
    return t;
  }();
  return tables;
}

// UE4M3 bytes -> ue4m3 * 2^-120 as F32 (count % 4 == 0), 8 at a time: the
// byte's 7 magnitude bits shifted into place are exactly that F32 pattern (a
// denormal when the UE4M3 exponent is 0, so subnormal scales stay exact;
// callers run under ScopedIeeeMode, no DAZ). Bit 7 is dropped, as the codec
// does. Returns true if a byte validate_weights rejects is among them.
NVFP4MOE_AVX2 inline bool convert_scales(const uint8_t* bytes, int64_t count, float* out) {
  const __m256i magnitude_mask = _mm256_set1_epi32(0x7F);
  const __m256i nan_pattern = _mm256_set1_epi8(0x7F);
  const __m256i smallest_negative = _mm256_set1_epi8(static_cast<char>(0x81));
  __m256i bad = _mm256_setzero_si256();
  int64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bytes + i));
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi8(b, nan_pattern));
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi8(_mm256_max_epu8(b, smallest_negative), b));
  }
  for (; i < count; ++i) {
    if (bad_scale_byte(bytes[i])) bad = _mm256_set1_epi8(1);
  }
  for (i = 0; i + 8 <= count; i += 8) {
    const __m256i raw = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + i)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm256_slli_epi32(_mm256_and_si256(raw, magnitude_mask), 20));
  }
  if (i < count) {
    int32_t four;
    std::memcpy(&four, bytes + i, 4);
    const __m128i raw = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(four));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm_slli_epi32(_mm_and_si128(raw, _mm_set1_epi32(0x7F)), 20));
  }
  return !_mm256_testz_si256(bad, bad);
}

NVFP4MOE_AVX2_INLINE float lane_sum(__m256 a) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));  // a_l + a_{l+4}
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));                                     // s0 + s2, s1 + s3
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_shuffle_ps(t, t, 1)));
}

}  // namespace nvfp4moe::cpu::x86

#endif
