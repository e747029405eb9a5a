// The sm90 packed weight chunk: where each element of a 64-row x 64-K chunk
// lives, shared by the host packer and the device dequantizer so the two
// cannot drift apart. [TAG_SM90_FRAGMENT_LAYOUT]
//
// The consumer warpgroup feeds wgmma.m64nNk16 with A (weights) from
// registers. Thread t = 32*warp + 4*g + q holds, per k16 step s, four bf16x2
// registers:
//   p0 = rows 16w+g,   k = 16s+2q, +1     p2 = rows 16w+g,   k = 16s+2q+8, +9
//   p1 = rows 16w+g+8, k = 16s+2q, +1     p3 = rows 16w+g+8, k = 16s+2q+8, +9
// Those 8 nibbles are one uint32 word, codes[t][s], so a thread reads its
// whole k64 fragment with one 16-byte shared-memory load.
//
// Inside the word each E2M1 code (s e1 e0 m) is bit-placed so that one or
// two shift-and-mask pieces (pair_bf16x2_bits) land sign at bit 15 and
// e1 e0 m at bits 8..6 of each bf16 half: the bf16 value is then exactly
// e2m1 * 2^-126 (the exponent field is e1e0, so code 0.5 becomes the bf16
// subnormal 2^-127; mul.bf16x2 keeps subnormals). Pair 0 is the word
// masked, pair 1 the word shifted left 6, pair 2 rotated left 12, pair 3
// two pieces (shifted left 2 and right 6). NOTES: shifted copies of the
// mask's half pattern {6, 7, 8, 15} cannot tile 16 bits (1+x+x^2+x^9 has no
// cyclotomic factor but 1+x, so it tiles no period), so one pair needs two
// pieces; a search over shifts, rotations and byte permutes of one word
// (scripts/sm90_code_layout_search.py) finds no layout under 9 instructions
// per word (this one: 5 LOP3, 2 SHF, 2 IMAD shifts; the previous one,
// shifts 0, 3, 6 and three pieces, 11).
//
// Scales: word[warp][g][j] (j = 0, 1) packs scale codes
//   byte0 = C(16w+g, 2j), byte1 = C(16w+g, 2j+1), byte2 = C(16w+g+8, 2j), byte3 = C(16w+g+8, 2j+1)
// where C(r, s) encodes the UE4M3 scale of row r over k16 step s. C is not
// the UE4M3 byte: a positive S = 2^E * (1 + m/8) (every UE4M3 value,
// subnormals included, has E in [-9, 8] and a 3-bit m) is stored
// normalised, C = (E + 10) << 3 | m, so that C * 16 + kScaleCodeBias is
// exactly the bf16 bits of S * 2^116: one prmt (the byte into both halves)
// and one integer multiply-add per factor, where UE4M3 bits needed a shift,
// a mask and two bf16 multiplies (2^236 does not fit BF16). S = 0 has no
// such form: its 16 codes are stored as +0 and C = 0, whose factor (2^106)
// then multiplies zeros.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define NVFP4MOE_HD __host__ __device__ __forceinline__
#else
#define NVFP4MOE_HD inline
#endif

namespace nvfp4moe::sm90 {

inline constexpr int kChunkThreads = 128;
inline constexpr int kChunkCodeWords = 128 * 4;   // [thread][k16 step]
inline constexpr int kChunkScaleWords = 4 * 8 * 2;  // [warp][g][j]

struct NibbleBits {
  uint8_t sign, e1, e0, m;  // bit positions inside the uint32 code word
};

// Bit positions of the element of pair p (0..3), half h (0 = lower k):
// where pair_bf16x2_bits finds them.
NVFP4MOE_HD NibbleBits nibble_bits(int p, int h) {
  const uint8_t o = static_cast<uint8_t>(16 * h);
  switch (p) {
    case 0: return {uint8_t(15 + o), uint8_t(8 + o), uint8_t(7 + o), uint8_t(6 + o)};
    case 1: return {uint8_t(9 + o), uint8_t(2 + o), uint8_t(1 + o), uint8_t(0 + o)};
    // Rotated by 12: half 0's e1 e0 m come from the top of the word.
    case 2: return h == 0 ? NibbleBits{3, 28, 27, 26} : NibbleBits{19, 12, 11, 10};
    default: return {uint8_t(13 + o), uint8_t(14 + o), uint8_t(5 + o), uint8_t(4 + o)};
  }
}

NVFP4MOE_HD uint32_t rotate_left(uint32_t x, int r) {
#if defined(__CUDA_ARCH__)
  return __funnelshift_l(x, x, r);
#else
  return x << (r & 31) | x >> ((32 - r) & 31);  // no shift by 32 at r = 0
#endif
}

// The bf16x2 bits of pair p of a code word, e2m1 * 2^-126 in each half:
// the device's decode (dequant.cuh) and the host test's.
NVFP4MOE_HD uint32_t pair_bf16x2_bits(uint32_t word, int p) {
  constexpr uint32_t kMask = 0x81C081C0u;  // sign 15, e1 e0 m 8..6 of each half
  switch (p) {
    case 0: return word & kMask;
    case 1: return (word << 6) & kMask;
    case 2: return rotate_left(word, 12) & kMask;
    default: return ((word << 2) & 0x80C080C0u) | ((word >> 6) & 0x01000100u);
  }
}

// Where element (row, k) of a chunk goes: thread, k16 step, pair, half.
struct FragmentSlot {
  int thread, step, pair, half;
};

NVFP4MOE_HD FragmentSlot fragment_slot(int row, int k) {
  const int warp = row / 16, rr = row % 16, g = rr % 8, hi_row = rr / 8;
  const int step = k / 16, kk = k % 16, q = (kk % 8) / 2, half = kk % 2, hi_k = kk / 8;
  return {warp * 32 + 4 * g + q, step, hi_row + 2 * hi_k, half};
}

NVFP4MOE_HD uint32_t place_code(uint32_t code, NibbleBits b) {
  return ((code >> 3) & 1u) << b.sign | ((code >> 2) & 1u) << b.e1 | ((code >> 1) & 1u) << b.e0 | (code & 1u) << b.m;
}

NVFP4MOE_HD uint32_t extract_code(uint32_t word, NibbleBits b) {
  return ((word >> b.sign) & 1u) << 3 | ((word >> b.e1) & 1u) << 2 | ((word >> b.e0) & 1u) << 1 | ((word >> b.m) & 1u);
}

// bf16 bits of S * 2^116 = C * 16 + kScaleCodeBias (exponent field E + 243).
inline constexpr uint32_t kScaleCodeBias = 233u << 7;
inline constexpr uint8_t kScaleCodeMax = (18 << 3) | 7;  // S = 448

// UE4M3 byte (not NaN, sign ignored: the weights are validated first) ->
// scale code. 0 for S = 0.
NVFP4MOE_HD uint8_t scale_code(uint8_t ue4m3) {
  const uint32_t e = (ue4m3 >> 3) & 0xF, m = ue4m3 & 7;
  if (e != 0) return static_cast<uint8_t>((e + 3) << 3 | m);  // E = e - 7
  if (m == 0) return 0;
  // Subnormal m * 2^-9: normalise the 3-bit m.
  const int top = m >= 4 ? 2 : m >= 2 ? 1 : 0;  // E = top - 9
  const uint32_t frac = (m << (3 - top)) & 7;
  return static_cast<uint8_t>((top + 1) << 3 | frac);
}

// Inverse of scale_code; false for a byte no UE4M3 value encodes to.
NVFP4MOE_HD bool ue4m3_from_scale_code(uint8_t code, uint8_t* ue4m3) {
  const int biased = code >> 3;  // E + 10
  const uint32_t m = code & 7;
  if (code == 0) {
    *ue4m3 = 0;
    return true;
  }
  if (biased < 1 || biased > 18) return false;
  if (biased >= 4) {  // E >= -6: normal UE4M3
    *ue4m3 = static_cast<uint8_t>((biased - 3) << 3 | m);
    return *ue4m3 != 0x7F;
  }
  // E in [-9, -7]: the subnormal (8 + m) * 2^(E - 3) must be a multiple of 2^-9.
  const int shift = 4 - biased;  // 3 - (E + 9)
  const uint32_t mant = 8 + m;
  if (mant & ((1u << shift) - 1)) return false;
  *ue4m3 = static_cast<uint8_t>(mant >> shift);
  return true;
}

// Scale byte (row in chunk, k16 step) -> (word index, byte in word).
NVFP4MOE_HD void scale_slot(int row, int step, int* word, int* byte) {
  const int warp = row / 16, rr = row % 16, g = rr % 8, hi_row = rr / 8;
  *word = (warp * 8 + g) * 2 + step / 2;
  *byte = (step % 2) + 2 * hi_row;
}

}  // namespace nvfp4moe::sm90
