// AVX2 + FMA kernels. Compiled with function target attributes instead of a
// global -mavx2 so that the library still runs on CPUs without AVX2; the
// dispatcher only hands these out after __builtin_cpu_supports agrees.
//
// Weight decode, one chunk (64 weights = 32 code bytes, 4 scale blocks) of
// one row, all in registers:
//   lo/hi nibbles (and, shift)  ->  two pshufb per nibble set look up the high
//   and low byte of the weight's BF16 pattern  ->  unpack{lo,hi}_epi8 pairs
//   them into BF16 words  ->  each 32-bit lane holds two words: `<< 16` gives
//   the F32 of the even word, `& 0xFFFF0000` the odd one  ->  times the block
//   scale (exact; see kScaleExponentOffset in kernels_x86.hpp). That yields 8 vectors whose element order defines
//   kChunkOrder (kernels.hpp); each vector mixes two scale blocks (lanes 0-3
//   and 4-7), hence the two scale vectors s02 and s13.
#include "cpu/kernels_x86.hpp"

namespace nvfp4moe::cpu {

#ifdef NVFP4MOE_HAVE_X86_KERNELS

namespace {

using x86::bf16_byte_tables;
using x86::ByteTables;
using x86::convert_scales;
using x86::lane_sum;

struct Decoder {
  __m256i high, low, nibble_mask, odd_word_mask;
  __m256i pick02, pick13;
};

NVFP4MOE_AVX2_INLINE Decoder make_decoder() {
  const ByteTables& t = bf16_byte_tables();
  Decoder d;
  d.high = _mm256_load_si256(reinterpret_cast<const __m256i*>(t.high));
  d.low = _mm256_load_si256(reinterpret_cast<const __m256i*>(t.low));
  d.nibble_mask = _mm256_set1_epi8(0x0F);
  d.odd_word_mask = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  d.pick02 = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2);
  d.pick13 = _mm256_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3);
  return d;
}

// 64 weights of one row in chunk order. scale points at the chunk's 4 block
// scales from convert_scales (offset by 2^-120, cancelled by the tables).
NVFP4MOE_AVX2_INLINE void decode_chunk(const Decoder& d, const uint8_t* codes, const float* scale, __m256 w[8]) {
  const __m256i packed = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes));
  const __m256i lo = _mm256_and_si256(packed, d.nibble_mask);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), d.nibble_mask);
  const __m256i lo_high = _mm256_shuffle_epi8(d.high, lo);
  const __m256i lo_low = _mm256_shuffle_epi8(d.low, lo);
  const __m256i hi_high = _mm256_shuffle_epi8(d.high, hi);
  const __m256i hi_low = _mm256_shuffle_epi8(d.low, hi);
  // Words: even K of blocks 0|2, even of 1|3, odd of 0|2, odd of 1|3.
  const __m256i even02 = _mm256_unpacklo_epi8(lo_low, lo_high);
  const __m256i even13 = _mm256_unpackhi_epi8(lo_low, lo_high);
  const __m256i odd02 = _mm256_unpacklo_epi8(hi_low, hi_high);
  const __m256i odd13 = _mm256_unpackhi_epi8(hi_low, hi_high);
  const __m256 s4 = _mm256_castps128_ps256(_mm_loadu_ps(scale));
  const __m256 s02 = _mm256_permutevar8x32_ps(s4, d.pick02);
  const __m256 s13 = _mm256_permutevar8x32_ps(s4, d.pick13);
  w[0] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(even02, 16)), s02);
  w[1] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(even02, d.odd_word_mask)), s02);
  w[2] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(odd02, 16)), s02);
  w[3] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(odd02, d.odd_word_mask)), s02);
  w[4] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(even13, 16)), s13);
  w[5] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(even13, d.odd_word_mask)), s13);
  w[6] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(odd13, 16)), s13);
  w[7] = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(odd13, d.odd_word_mask)), s13);
}

NVFP4MOE_AVX2 bool dequant_panel(const WeightRows& w, int rows, int64_t k0, int64_t kp, float* tile, int64_t ld) {
  constexpr int64_t kStep = 1024;  // K elements whose scales are converted at once
  const Decoder d = make_decoder();
  alignas(32) float scale[kStep / 16];
  bool bad = false;
  for (int n = 0; n < rows; ++n) {
    const uint8_t* codes = w.codes + n * (w.cols / 2) + k0 / 2;
    const uint8_t* scales = w.scales + n * (w.cols / 16) + k0 / 16;
    float* out = tile + n * ld;
    for (int64_t step = 0; step < kp; step += kStep) {
      const int64_t len = kp - step < kStep ? kp - step : kStep;
      bad |= convert_scales(scales + step / 16, len / 16, scale);
      for (int64_t k = step; k < step + len; k += kChunk) {
        __m256 v[8];
        decode_chunk(d, codes + k / 2, scale + (k - step) / 16, v);
        for (int i = 0; i < 8; ++i) _mm256_storeu_ps(out + k + 8 * i, v[i]);
      }
    }
  }
  return bad;
}

// MR activation rows x NR tile rows, 8 lanes each. The weight vectors stay in
// registers and each activation vector is loaded once per step: MR * NR
// accumulators + NR + 1 <= 16 registers (4 x 3, 2 x 4, 1 x 6 are used).
template <int MR, int NR>
NVFP4MOE_AVX2 void gemm_block(const float* const* x, const float* tile, int64_t ld, int64_t kp, float* partial,
                              int64_t partial_stride, bool first, bool last, float* sums, int64_t sums_stride) {
  __m256 acc[MR][NR];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 6
    for (int c = 0; c < NR; ++c) {
      acc[r][c] = first ? _mm256_setzero_ps() : _mm256_loadu_ps(partial + r * partial_stride + c * kLanes);
    }
  }
  const float* xr[MR];
  for (int r = 0; r < MR; ++r) xr[r] = x[r];
  for (int64_t i = 0; i < kp; i += kLanes) {
    __m256 wv[NR];
#pragma GCC unroll 6
    for (int c = 0; c < NR; ++c) wv[c] = _mm256_loadu_ps(tile + c * ld + i);
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      const __m256 xv = _mm256_loadu_ps(xr[r] + i);
#pragma GCC unroll 6
      for (int c = 0; c < NR; ++c) acc[r][c] = _mm256_fmadd_ps(xv, wv[c], acc[r][c]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int c = 0; c < NR; ++c) {
      if (last) {
        sums[r * sums_stride + c] = lane_sum(acc[r][c]);
      } else {
        _mm256_storeu_ps(partial + r * partial_stride + c * kLanes, acc[r][c]);
      }
    }
  }
}

// All tile rows against MR activation rows: blocks of NR rows, then one
// narrower block for the remainder.
template <int MR, int NR>
NVFP4MOE_AVX2 void gemm_rows(const float* const* x, const float* tile, int64_t ld, int count, int64_t kp,
                             float* partial, int64_t partial_stride, bool first, bool last, float* sums,
                             int64_t sums_stride) {
  int n = 0;
  for (; n + NR <= count; n += NR) {
    gemm_block<MR, NR>(x, tile + n * ld, ld, kp, partial + n * kLanes, partial_stride, first, last, sums + n,
                       sums_stride);
  }
  if constexpr (NR > 1) {
    if (n < count) {
      gemm_rows<MR, NR - 1>(x, tile + n * ld, ld, count - n, kp, partial + n * kLanes, partial_stride, first, last,
                            sums + n, sums_stride);
    }
  }
}

NVFP4MOE_AVX2 void gemm_panel(const float* const* x, int num_x, const float* tile, int64_t ld, int rows, int64_t kp,
                              float* partial, bool first, bool last, float* sums, int64_t sums_stride) {
  const int64_t ps = static_cast<int64_t>(rows) * kLanes;  // partial is [r][n][lane]
  int r = 0;
  for (; r + 4 <= num_x; r += 4) {
    gemm_rows<4, 3>(x + r, tile, ld, rows, kp, partial + r * ps, ps, first, last, sums + r * sums_stride, sums_stride);
  }
  float* p = partial + r * ps;
  float* s = sums + r * sums_stride;
  switch (num_x - r) {
    case 3: gemm_rows<3, 3>(x + r, tile, ld, rows, kp, p, ps, first, last, s, sums_stride); break;
    case 2: gemm_rows<2, 4>(x + r, tile, ld, rows, kp, p, ps, first, last, s, sums_stride); break;
    case 1: gemm_rows<1, 6>(x + r, tile, ld, rows, kp, p, ps, first, last, s, sums_stride); break;
    default: break;
  }
}

constexpr int64_t kPrefetchBytes = 512;

// G weight rows decoded chunk by chunk and dotted with NX activation rows.
// Several independent rows keep enough FMA chains in flight to hide latency.
template <int G, int NX>
NVFP4MOE_AVX2 bool gemv_group(const Decoder& d, const WeightRows& w, const float* const* x, float* sums,
                              int64_t sums_stride, float* scratch) {
  const int64_t K = w.cols;
  const int64_t scales_per_row = K / 16;
  bool bad = false;
  for (int g = 0; g < G; ++g) bad |= convert_scales(w.scales + g * scales_per_row, scales_per_row, scratch + g * scales_per_row);
  __m256 acc[G][NX];
  for (int g = 0; g < G; ++g) {
    for (int r = 0; r < NX; ++r) acc[g][r] = _mm256_setzero_ps();
  }
  const float* xr[NX];
  for (int r = 0; r < NX; ++r) xr[r] = x[r];
  for (int64_t k = 0; k < K; k += kChunk) {
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      // The rows are read once: fetch ahead of the hardware prefetcher, which
      // ramps up too slowly on G interleaved streams of ~1 KB each.
      _mm_prefetch(reinterpret_cast<const char*>(w.codes + g * (K / 2) + k / 2 + kPrefetchBytes), _MM_HINT_T0);
      __m256 v[8];
      decode_chunk(d, w.codes + g * (K / 2) + k / 2, scratch + g * scales_per_row + k / 16, v);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
#pragma GCC unroll 4
        for (int r = 0; r < NX; ++r) acc[g][r] = _mm256_fmadd_ps(_mm256_loadu_ps(xr[r] + k + 8 * i), v[i], acc[g][r]);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int r = 0; r < NX; ++r) sums[r * sums_stride + g] = lane_sum(acc[g][r]);
  }
  return bad;
}

template <int NX>
NVFP4MOE_AVX2 bool gemv_rows(const WeightRows& w, int rows, const float* const* x, float* sums, int64_t sums_stride,
                             float* scratch) {
  constexpr int G = 4;
  static_assert(G <= kDirectGroup, "scratch holds kDirectGroup rows of scales");
  const Decoder d = make_decoder();
  bool bad = false;
  int n = 0;
  for (; n + G <= rows; n += G) {
    const WeightRows part{w.codes + n * (w.cols / 2), w.scales + n * (w.cols / 16), w.cols};
    bad |= gemv_group<G, NX>(d, part, x, sums + n, sums_stride, scratch);
  }
  for (; n < rows; ++n) {
    const WeightRows part{w.codes + n * (w.cols / 2), w.scales + n * (w.cols / 16), w.cols};
    bad |= gemv_group<1, NX>(d, part, x, sums + n, sums_stride, scratch);
  }
  return bad;
}

NVFP4MOE_AVX2 bool gemv_direct(const WeightRows& w, int rows, const float* const* x, int num_x, float* sums,
                               int64_t sums_stride, float* scratch) {
  switch (num_x) {
    case 1: return gemv_rows<1>(w, rows, x, sums, sums_stride, scratch);
    case 2: return gemv_rows<2>(w, rows, x, sums, sums_stride, scratch);
    case 3: return gemv_rows<3>(w, rows, x, sums, sums_stride, scratch);
    default: return false;
    static_assert(kMaxDirectRows == 3, "one case per supported row count");
  }
}

}  // namespace

const Kernels* avx2_kernels() {
  static const bool supported = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  static const Kernels kernels{"avx2", dequant_panel, gemm_panel, gemv_direct};
  return supported ? &kernels : nullptr;
}

#else

const Kernels* avx2_kernels() { return nullptr; }

#endif

}  // namespace nvfp4moe::cpu
