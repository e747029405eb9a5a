// Element and scale codecs. Every encoder works on the IEEE bit pattern with
// integer arithmetic (or on comparisons against exactly representable
// midpoints), so the rounding does not depend on the FPU rounding mode and
// cannot go wrong at ties.
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "nvfp4moe/format.hpp"

namespace nvfp4moe {
namespace {

constexpr uint32_t kF32SignBit = 0x80000000u;
constexpr uint32_t kF32MantissaMask = 0x007FFFFFu;
constexpr uint32_t kF32ImplicitBit = 0x00800000u;
constexpr int kF32Bias = 127;

constexpr uint8_t kE2M1SignBit = 0x8;
constexpr uint8_t kUE4M3NaN = 0x7F;
constexpr uint8_t kUE4M3MaxCode = 0x7E;  // 1.75 * 2^8 = 448
constexpr int kUE4M3Bias = 7;
constexpr int kUE4M3MantissaBits = 3;

constexpr float kE2M1Magnitudes[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

// Rounds mant * 2^-shift to the nearest integer, ties to even. mant < 2^25,
// 1 <= shift <= 31.
uint32_t shift_right_round_even(uint32_t mant, int shift) {
  const uint32_t kept = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  return kept + ((rem > half || (rem == half && (kept & 1u))) ? 1u : 0u);
}

// Decoded by table because dequantization calls this once per 16 weights in
// the CPU hot loops. Built from the bit pattern: normals are 1.m * 2^(e - 7),
// subnormals m * 2^-9 (an exact product of small floats).
constexpr std::array<float, 128> make_ue4m3_table() {
  std::array<float, 128> t{};
  for (int b = 0; b < 128; ++b) {
    const int exponent = b >> kUE4M3MantissaBits;
    const int mantissa = b & 0x7;
    if (b == kUE4M3NaN) {
      t[b] = std::numeric_limits<float>::quiet_NaN();
    } else if (exponent == 0) {
      t[b] = static_cast<float>(mantissa) * (1.0f / 512.0f);
    } else {
      t[b] = std::bit_cast<float>(static_cast<uint32_t>(exponent - kUE4M3Bias + kF32Bias) << 23 |
                                  static_cast<uint32_t>(mantissa) << (23 - kUE4M3MantissaBits));
    }
  }
  return t;
}
constexpr std::array<float, 128> kUE4M3Values = make_ue4m3_table();

}  // namespace

float e2m1_to_float(uint8_t code) {
  const float magnitude = kE2M1Magnitudes[code & 0x7];
  return (code & kE2M1SignBit) ? -magnitude : magnitude;
}

// The midpoints between neighbouring E2M1 magnitudes (0.25, 0.75, ...) are
// exact floats, so comparing against them is exact. At a midpoint the even
// code (even mantissa bit) wins: 0.25 -> 0, 0.75 -> 1.0, 1.25 -> 1.0,
// 1.75 -> 2.0, 2.5 -> 2.0, 3.5 -> 4.0, 5 -> 4.0.
// The sign bit is copied from x even when the magnitude rounds to 0, so -0.0f
// and tiny negatives encode to 0x8 (-0): decoding gives -0.0f, which is
// numerically zero and keeps the sign information of the input.
uint8_t float_to_e2m1(float x) {
  if (std::isnan(x)) return 0;
  const float a = std::fabs(x);
  uint8_t magnitude_code;
  if (a <= 0.25f) {
    magnitude_code = 0;
  } else if (a < 0.75f) {
    magnitude_code = 1;
  } else if (a <= 1.25f) {
    magnitude_code = 2;
  } else if (a < 1.75f) {
    magnitude_code = 3;
  } else if (a <= 2.5f) {
    magnitude_code = 4;
  } else if (a < 3.5f) {
    magnitude_code = 5;
  } else if (a <= 5.0f) {
    magnitude_code = 6;
  } else {
    magnitude_code = 7;  // (5, inf]: saturates to 6
  }
  return static_cast<uint8_t>(magnitude_code | (std::signbit(x) ? kE2M1SignBit : 0));
}

// 0x7F/0xFF decode to NaN, unlike ggml, which maps them to 0: a scale byte
// with that pattern can only come from a corrupt or mis-typed file (our
// quantizer never writes it and ModelOpt never does either), and a NaN makes
// the damage visible in every output it touches instead of silently zeroing
// 16 weights. validate_weights() reports such bytes with their position.
float ue4m3_to_float(uint8_t byte) { return kUE4M3Values[byte & 0x7F]; }

// Every UE4M3 value is q * 2^(max(e, 1) - 10) with q = 0..15, so the code is
// the integer q (for subnormals) or (e << 3) + q - 8 (normals); a rounding
// carry out of the mantissa moves into the exponent with a plain +1 on the
// code, which is why the subnormal q = 8 result 0x08 is also the right code
// for 2^-6.
uint8_t float_to_ue4m3(float x) {
  if (!(x > 0.0f)) return 0;  // zero, negatives and NaN
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const int biased_exponent = static_cast<int>((bits & ~kF32SignBit) >> 23);
  if (biased_exponent == 0) return 0;  // F32 subnormals are far below 2^-10
  const int exponent = biased_exponent - kF32Bias;  // x = 1.m * 2^exponent
  const uint32_t mant = (bits & kF32MantissaMask) | kF32ImplicitBit;
  constexpr int kMinNormalExponent = 1 - kUE4M3Bias;  // 2^-6
  if (exponent < kMinNormalExponent) {
    // q = x / 2^-9 = mant * 2^(exponent - 23 + 9). Below 2^-10, half the
    // smallest subnormal, everything rounds to 0.
    if (exponent < -10) return 0;
    return static_cast<uint8_t>(shift_right_round_even(mant, 14 - exponent));
  }
  if (exponent > 15 - kUE4M3Bias) return kUE4M3MaxCode;  // >= 512, and infinity
  const uint32_t code = (static_cast<uint32_t>(exponent + kUE4M3Bias) << kUE4M3MantissaBits) +
                        shift_right_round_even(mant, 23 - kUE4M3MantissaBits) - 8u;
  return code > kUE4M3MaxCode ? kUE4M3MaxCode : static_cast<uint8_t>(code);
}

uint16_t float_to_bf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  // Quieting keeps a signalling NaN from turning into infinity when its
  // payload lives only in the dropped low half.
  if (std::isnan(x)) return static_cast<uint16_t>((bits >> 16) | 0x0040u);
  const uint32_t lsb = (bits >> 16) & 1u;
  // Carries into the exponent (and up to infinity) are the correct rounding.
  return static_cast<uint16_t>((bits + 0x7FFFu + lsb) >> 16);
}

float bf16_to_float(uint16_t x) { return std::bit_cast<float>(static_cast<uint32_t>(x) << 16); }

}  // namespace nvfp4moe
