// AVX-512 kernels (F, BW, DQ, VL): the AVX2 algorithms on 512-bit registers
// whose two 256-bit halves carry two independent 8-lane accumulators, so the
// canonical chain of kernels.hpp (and every result bit) is unchanged:
//  - decode: the two halves hold two weight rows; every step of the AVX2
//    decoder works per 128-bit lane, so each half decodes exactly as AVX2;
//  - tiled: the two halves hold two activation rows (interleaved once per
//    panel into a small buffer) against one broadcast tile row.
// GCC 12's AVX-512 intrinsics build their results from _mm512_undefined_*(),
// which -Wmaybe-uninitialized reports at every use (a known false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include "cpu/kernels_x86.hpp"

namespace nvfp4moe::cpu {

#ifdef NVFP4MOE_HAVE_X86_KERNELS

#define NVFP4MOE_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma")))
#define NVFP4MOE_AVX512_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx2,fma"), always_inline)) inline

namespace {

using x86::convert_scales;
using x86::lane_sum;

struct Decoder {
  __m512i high, low, nibble_mask, odd_word_mask;
  __m512i pick02, pick13;
};

NVFP4MOE_AVX512_INLINE Decoder make_decoder() {
  const x86::ByteTables& t = x86::bf16_byte_tables();
  Decoder d;
  d.high = _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(t.high)));
  d.low = _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(t.low)));
  d.nibble_mask = _mm512_set1_epi8(0x0F);
  d.odd_word_mask = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  // Indices 16.. select from the second row's scales.
  d.pick02 = _mm512_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2, 16, 16, 16, 16, 18, 18, 18, 18);
  d.pick13 = _mm512_setr_epi32(1, 1, 1, 1, 3, 3, 3, 3, 17, 17, 17, 17, 19, 19, 19, 19);
  return d;
}

// One chunk of two rows: row a in the low halves of w[], row b in the high.
NVFP4MOE_AVX512_INLINE void decode_pair(const Decoder& d, const uint8_t* codes_a, const uint8_t* codes_b,
                                        const float* scale_a, const float* scale_b, __m512 w[8]) {
  const __m512i packed =
      _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes_a))),
                         _mm256_loadu_si256(reinterpret_cast<const __m256i*>(codes_b)), 1);
  const __m512i lo = _mm512_and_si512(packed, d.nibble_mask);
  const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(packed, 4), d.nibble_mask);
  const __m512i lo_high = _mm512_shuffle_epi8(d.high, lo);
  const __m512i lo_low = _mm512_shuffle_epi8(d.low, lo);
  const __m512i hi_high = _mm512_shuffle_epi8(d.high, hi);
  const __m512i hi_low = _mm512_shuffle_epi8(d.low, hi);
  const __m512i even02 = _mm512_unpacklo_epi8(lo_low, lo_high);
  const __m512i even13 = _mm512_unpackhi_epi8(lo_low, lo_high);
  const __m512i odd02 = _mm512_unpacklo_epi8(hi_low, hi_high);
  const __m512i odd13 = _mm512_unpackhi_epi8(hi_low, hi_high);
  const __m512 sa = _mm512_zextps128_ps512(_mm_loadu_ps(scale_a));
  const __m512 sb = _mm512_zextps128_ps512(_mm_loadu_ps(scale_b));
  const __m512 s02 = _mm512_permutex2var_ps(sa, d.pick02, sb);
  const __m512 s13 = _mm512_permutex2var_ps(sa, d.pick13, sb);
  w[0] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(even02, 16)), s02);
  w[1] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(even02, d.odd_word_mask)), s02);
  w[2] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(odd02, 16)), s02);
  w[3] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(odd02, d.odd_word_mask)), s02);
  w[4] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(even13, 16)), s13);
  w[5] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(even13, d.odd_word_mask)), s13);
  w[6] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(odd13, 16)), s13);
  w[7] = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_and_si512(odd13, d.odd_word_mask)), s13);
}

NVFP4MOE_AVX512_INLINE __m512 broadcast8(const float* p) { return _mm512_broadcast_f32x8(_mm256_loadu_ps(p)); }

NVFP4MOE_AVX512_INLINE __m512 pair(const float* a, const float* b) {
  return _mm512_insertf32x8(_mm512_zextps256_ps512(_mm256_loadu_ps(a)), _mm256_loadu_ps(b), 1);
}

NVFP4MOE_AVX512_INLINE float low_sum(__m512 a) { return lane_sum(_mm512_castps512_ps256(a)); }
NVFP4MOE_AVX512_INLINE float high_sum(__m512 a) { return lane_sum(_mm512_extractf32x8_ps(a, 1)); }

NVFP4MOE_AVX512 bool dequant_panel(const WeightRows& w, int rows, int64_t k0, int64_t kp, float* tile, int64_t ld) {
  constexpr int64_t kStep = 1024;
  const Decoder d = make_decoder();
  alignas(64) float scale[2][kStep / 16];
  bool bad = false;
  for (int n = 0; n < rows; n += 2) {
    const int nb = n + 1 < rows ? n + 1 : n;  // an odd last row pairs with itself
    const uint8_t* codes_a = w.codes + n * (w.cols / 2) + k0 / 2;
    const uint8_t* codes_b = w.codes + nb * (w.cols / 2) + k0 / 2;
    const uint8_t* scales_a = w.scales + n * (w.cols / 16) + k0 / 16;
    const uint8_t* scales_b = w.scales + nb * (w.cols / 16) + k0 / 16;
    float* out_a = tile + n * ld;
    float* out_b = tile + nb * ld;
    for (int64_t step = 0; step < kp; step += kStep) {
      const int64_t len = kp - step < kStep ? kp - step : kStep;
      bad |= convert_scales(scales_a + step / 16, len / 16, scale[0]);
      bad |= convert_scales(scales_b + step / 16, len / 16, scale[1]);
      for (int64_t k = step; k < step + len; k += kChunk) {
        __m512 v[8];
        decode_pair(d, codes_a + k / 2, codes_b + k / 2, scale[0] + (k - step) / 16, scale[1] + (k - step) / 16, v);
        for (int i = 0; i < 8; ++i) {
          _mm256_storeu_ps(out_a + k + 8 * i, _mm512_castps512_ps256(v[i]));
          _mm256_storeu_ps(out_b + k + 8 * i, _mm512_extractf32x8_ps(v[i], 1));
        }
      }
    }
  }
  return bad;
}

// MP activation row pairs (interleaved: pair p, step i at xpair + (p * kp + i) * 2)
// x NR broadcast tile rows; MP * NR + MP + 1 <= 32 registers.
template <int MP, int NR>
NVFP4MOE_AVX512 void gemm_block(const float* xpair, const float* tile, int64_t ld, int64_t kp, float* partial,
                                int64_t partial_stride, bool pair_full[MP], bool first, bool last, float* sums,
                                int64_t sums_stride) {
  __m512 acc[MP][NR];
#pragma GCC unroll 4
  for (int p = 0; p < MP; ++p) {
#pragma GCC unroll 8
    for (int c = 0; c < NR; ++c) {
      acc[p][c] = first ? _mm512_setzero_ps()
                        : pair(partial + (2 * p) * partial_stride + c * kLanes,
                               partial + (2 * p + (pair_full[p] ? 1 : 0)) * partial_stride + c * kLanes);
    }
  }
  for (int64_t i = 0; i < kp; i += kLanes) {
    __m512 xv[MP];
#pragma GCC unroll 4
    for (int p = 0; p < MP; ++p) xv[p] = _mm512_loadu_ps(xpair + (p * kp + i) * 2);
#pragma GCC unroll 8
    for (int c = 0; c < NR; ++c) {
      const __m512 wv = broadcast8(tile + c * ld + i);
#pragma GCC unroll 4
      for (int p = 0; p < MP; ++p) acc[p][c] = _mm512_fmadd_ps(xv[p], wv, acc[p][c]);
    }
  }
  for (int p = 0; p < MP; ++p) {
    for (int c = 0; c < NR; ++c) {
      float* lo = partial + (2 * p) * partial_stride + c * kLanes;
      float* hi = partial + (2 * p + 1) * partial_stride + c * kLanes;
      if (last) {
        sums[(2 * p) * sums_stride + c] = low_sum(acc[p][c]);
        if (pair_full[p]) sums[(2 * p + 1) * sums_stride + c] = high_sum(acc[p][c]);
      } else {
        _mm256_storeu_ps(lo, _mm512_castps512_ps256(acc[p][c]));
        if (pair_full[p]) _mm256_storeu_ps(hi, _mm512_extractf32x8_ps(acc[p][c], 1));
      }
    }
  }
}

template <int MP, int NR>
NVFP4MOE_AVX512 void gemm_rows(const float* xpair, const float* tile, int64_t ld, int count, int64_t kp,
                               float* partial, int64_t partial_stride, bool pair_full[MP], bool first, bool last,
                               float* sums, int64_t sums_stride) {
  int n = 0;
  for (; n + NR <= count; n += NR) {
    gemm_block<MP, NR>(xpair, tile + n * ld, ld, kp, partial + n * kLanes, partial_stride, pair_full, first, last,
                       sums + n, sums_stride);
  }
  if constexpr (NR > 1) {
    if (n < count) {
      gemm_rows<MP, NR - 1>(xpair, tile + n * ld, ld, count - n, kp, partial + n * kLanes, partial_stride,
                            pair_full, first, last, sums + n, sums_stride);
    }
  }
}

// Activation rows are taken MP pairs at a time; each pair is interleaved into
// xpair ([x_a[i..i+8), x_b[i..i+8)] per step) for sub-panels of kSub elements.
constexpr int kPairs = 3;    // 6 activation rows x 6 tile rows: 18 accumulators
constexpr int kTileRows = 6;
constexpr int64_t kSub = 512;

template <int MP>
NVFP4MOE_AVX512 void gemm_group(const float* const* x, int num_x, const float* tile, int64_t ld, int rows,
                                int64_t kp, float* partial, bool first, bool last, float* sums,
                                int64_t sums_stride) {
  alignas(64) float xpair[kPairs * kSub * 2];
  bool pair_full[MP];
  for (int p = 0; p < MP; ++p) pair_full[p] = 2 * p + 1 < num_x;
  const int64_t ps = static_cast<int64_t>(rows) * kLanes;
  for (int64_t s0 = 0; s0 < kp; s0 += kSub) {
    const int64_t len = kp - s0 < kSub ? kp - s0 : kSub;
    for (int p = 0; p < MP; ++p) {
      const float* a = x[2 * p] + s0;
      const float* b = pair_full[p] ? x[2 * p + 1] + s0 : a;
      for (int64_t i = 0; i < len; i += kLanes) _mm512_storeu_ps(xpair + (p * len + i) * 2, pair(a + i, b + i));
    }
    gemm_rows<MP, kTileRows>(xpair, tile + s0, ld, rows, len, partial, ps, pair_full, first && s0 == 0,
                             last && s0 + len == kp, sums, sums_stride);
  }
}

NVFP4MOE_AVX512 void gemm_panel(const float* const* x, int num_x, const float* tile, int64_t ld, int rows,
                                int64_t kp, float* partial, bool first, bool last, float* sums,
                                int64_t sums_stride) {
  const int64_t ps = static_cast<int64_t>(rows) * kLanes;
  int r = 0;
  for (; r + 2 * kPairs <= num_x; r += 2 * kPairs) {
    gemm_group<kPairs>(x + r, 2 * kPairs, tile, ld, rows, kp, partial + r * ps, first, last, sums + r * sums_stride,
                       sums_stride);
  }
  const int left = num_x - r;
  float* p = partial + r * ps;
  float* s = sums + r * sums_stride;
  static_assert(kPairs == 3, "remainders below cover up to 2 * kPairs - 1 rows");
  if (left > 4) {
    gemm_group<3>(x + r, left, tile, ld, rows, kp, p, first, last, s, sums_stride);
  } else if (left > 2) {
    gemm_group<2>(x + r, left, tile, ld, rows, kp, p, first, last, s, sums_stride);
  } else if (left > 0) {
    gemm_group<1>(x + r, left, tile, ld, rows, kp, p, first, last, s, sums_stride);
  }
}

constexpr int64_t kPrefetchBytes = 512;  // see the AVX2 gemv

// G row pairs decoded per chunk and dotted with NX activation rows.
template <int G, int NX>
NVFP4MOE_AVX512 bool gemv_group(const Decoder& d, const WeightRows& w, int rows, const float* const* x, float* sums,
                                int64_t sums_stride, float* scratch) {
  const int64_t K = w.cols;
  const int64_t scales_per_row = K / 16;
  bool bad = false;
  const uint8_t* codes[2 * G];
  const float* scale[2 * G];
  for (int i = 0; i < 2 * G; ++i) {
    const int row = i < rows ? i : rows - 1;  // missing rows repeat the last one; their sums are dropped
    codes[i] = w.codes + row * (K / 2);
    scale[i] = scratch + i * scales_per_row;
    bad |= convert_scales(w.scales + row * scales_per_row, scales_per_row, scratch + i * scales_per_row);
  }
  __m512 acc[G][NX];
  for (int g = 0; g < G; ++g) {
    for (int r = 0; r < NX; ++r) acc[g][r] = _mm512_setzero_ps();
  }
  for (int64_t k = 0; k < K; k += kChunk) {
    __m512 xv[NX][8];
#pragma GCC unroll 4
    for (int r = 0; r < NX; ++r) {
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) xv[r][i] = broadcast8(x[r] + k + 8 * i);
    }
#pragma GCC unroll 4
    for (int g = 0; g < G; ++g) {
      _mm_prefetch(reinterpret_cast<const char*>(codes[2 * g] + k / 2 + kPrefetchBytes), _MM_HINT_T0);
      _mm_prefetch(reinterpret_cast<const char*>(codes[2 * g + 1] + k / 2 + kPrefetchBytes), _MM_HINT_T0);
      __m512 v[8];
      decode_pair(d, codes[2 * g] + k / 2, codes[2 * g + 1] + k / 2, scale[2 * g] + k / 16, scale[2 * g + 1] + k / 16,
                  v);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
#pragma GCC unroll 4
        for (int r = 0; r < NX; ++r) acc[g][r] = _mm512_fmadd_ps(xv[r][i], v[i], acc[g][r]);
      }
    }
  }
  for (int g = 0; g < G; ++g) {
    for (int r = 0; r < NX; ++r) {
      if (2 * g < rows) sums[r * sums_stride + 2 * g] = low_sum(acc[g][r]);
      if (2 * g + 1 < rows) sums[r * sums_stride + 2 * g + 1] = high_sum(acc[g][r]);
    }
  }
  return bad;
}

template <int NX>
NVFP4MOE_AVX512 bool gemv_rows(const WeightRows& w, int rows, const float* const* x, float* sums, int64_t sums_stride,
                               float* scratch) {
  constexpr int G = NX == 1 ? kDirectGroup / 2 : kDirectGroup / 4;  // row pairs in flight
  const Decoder d = make_decoder();
  bool bad = false;
  for (int n = 0; n < rows; n += 2 * G) {
    const int count = rows - n < 2 * G ? rows - n : 2 * G;
    const WeightRows part{w.codes + n * (w.cols / 2), w.scales + n * (w.cols / 16), w.cols};
    bad |= gemv_group<G, NX>(d, part, count, x, sums + n, sums_stride, scratch);
  }
  return bad;
}

NVFP4MOE_AVX512 bool gemv_direct(const WeightRows& w, int rows, const float* const* x, int num_x, float* sums,
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

const Kernels* avx512_kernels() {
  static const bool supported = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                                __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
                                __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  static const Kernels kernels{"avx512", dequant_panel, gemm_panel, gemv_direct};
  return supported ? &kernels : nullptr;
}

#else

const Kernels* avx512_kernels() { return nullptr; }

#endif

}  // namespace nvfp4moe::cpu
