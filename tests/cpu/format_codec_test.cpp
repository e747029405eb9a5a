// Codec tests: E2M1, UE4M3 and BF16, exhaustive over the code space where it
// is small, with expected values computed independently (formulas in double)
// rather than through the functions under test.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "nvfp4moe/format.hpp"
#include "test_util.hpp"

namespace nvfp4moe {
namespace {

// s.e1e0.m with bias 1; exponent 0 is subnormal (m * 0.5).
double e2m1_formula(int code) {
  const int sign = (code >> 3) & 1;
  const int e = (code >> 1) & 3;
  const int m = code & 1;
  const double mag = e == 0 ? m * 0.5 : std::ldexp(1.0 + m * 0.5, e - 1);
  return sign ? -mag : mag;
}

// 4 exponent bits (bias 7), 3 mantissa bits; bit 7 ignored; 0x7F is NaN.
double ue4m3_formula(int byte) {
  const int b = byte & 0x7F;
  if (b == 0x7F) return std::numeric_limits<double>::quiet_NaN();
  const int e = b >> 3;
  const int m = b & 7;
  if (e == 0) return m * std::ldexp(1.0, -9);
  return (1.0 + m / 8.0) * std::ldexp(1.0, e - 7);
}

TEST(E2m1, AllSixteenCodesDecodeToTheTable) {
  const float table[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                           -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (int c = 0; c < 16; ++c) {
    const float v = e2m1_to_float(static_cast<uint8_t>(c));
    EXPECT_EQ(std::bit_cast<uint32_t>(v), std::bit_cast<uint32_t>(table[c])) << "code " << c;
    EXPECT_EQ(static_cast<double>(v), e2m1_formula(c)) << "code " << c;
    // Only the low 4 bits count.
    EXPECT_EQ(std::bit_cast<uint32_t>(e2m1_to_float(static_cast<uint8_t>(c | 0xA0))),
              std::bit_cast<uint32_t>(v));
  }
}

TEST(E2m1, EveryRepresentableValueRoundTrips) {
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(float_to_e2m1(e2m1_to_float(static_cast<uint8_t>(c))), c) << "code " << c;
  }
}

TEST(E2m1, TiesGoToTheEvenCode) {
  struct Case {
    float x;
    float expected;
  };
  const Case cases[] = {{0.25f, 0.0f}, {0.75f, 1.0f}, {1.25f, 1.0f}, {1.75f, 2.0f},
                        {2.5f, 2.0f},  {3.5f, 4.0f},  {5.0f, 4.0f}};
  for (const Case& c : cases) {
    EXPECT_EQ(e2m1_to_float(float_to_e2m1(c.x)), c.expected) << c.x;
    EXPECT_EQ(e2m1_to_float(float_to_e2m1(-c.x)), -c.expected) << -c.x;
    // One ulp either side of the tie goes to the nearer neighbour.
    const float above = std::nextafter(c.x, 10.0f);
    const float below = std::nextafter(c.x, 0.0f);
    const float hi = e2m1_to_float(float_to_e2m1(above));
    const float lo = e2m1_to_float(float_to_e2m1(below));
    EXPECT_GT(hi, lo) << c.x;
    EXPECT_LE(std::fabs(hi - above), std::fabs(lo - above)) << c.x;
    EXPECT_LE(std::fabs(lo - below), std::fabs(hi - below)) << c.x;
  }
}

TEST(E2m1, NearestOnARandomSweep) {
  std::mt19937_64 rng(testing::test_seed());
  std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
  for (int i = 0; i < 20000; ++i) {
    const float x = dist(rng);
    const double got = e2m1_to_float(float_to_e2m1(x));
    const double clamped = std::fmin(std::fmax(static_cast<double>(x), -6.0), 6.0);
    for (int c = 0; c < 16; ++c) {
      ASSERT_LE(std::fabs(got - clamped), std::fabs(e2m1_formula(c) - clamped)) << "x = " << x;
    }
  }
}

TEST(E2m1, SaturatesAndHandlesSpecials) {
  EXPECT_EQ(float_to_e2m1(6.5f), 0x7);
  EXPECT_EQ(float_to_e2m1(1e30f), 0x7);
  EXPECT_EQ(float_to_e2m1(std::numeric_limits<float>::infinity()), 0x7);
  EXPECT_EQ(float_to_e2m1(-7.0f), 0xF);
  EXPECT_EQ(float_to_e2m1(-std::numeric_limits<float>::infinity()), 0xF);
  EXPECT_EQ(float_to_e2m1(std::numeric_limits<float>::quiet_NaN()), 0x0);
  EXPECT_EQ(float_to_e2m1(-std::numeric_limits<float>::quiet_NaN()), 0x0);
  EXPECT_EQ(float_to_e2m1(0.0f), 0x0);
  // The sign survives a magnitude that rounds to zero.
  EXPECT_EQ(float_to_e2m1(-0.0f), 0x8);
  EXPECT_EQ(float_to_e2m1(-0.1f), 0x8);
  EXPECT_EQ(float_to_e2m1(-1e-40f), 0x8);
  EXPECT_TRUE(std::signbit(e2m1_to_float(0x8)));
}

TEST(Ue4m3, All256BytesDecodeToTheFormula) {
  for (int b = 0; b < 256; ++b) {
    const double expected = ue4m3_formula(b);
    const float got = ue4m3_to_float(static_cast<uint8_t>(b));
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got)) << "byte " << b;
    } else {
      EXPECT_EQ(static_cast<double>(got), expected) << "byte " << b;
      EXPECT_FALSE(std::signbit(got)) << "byte " << b;
    }
  }
  EXPECT_EQ(ue4m3_to_float(0x7E), kUE4M3Max);
  EXPECT_EQ(ue4m3_to_float(0x01), std::ldexp(1.0f, -9));
  EXPECT_EQ(ue4m3_to_float(0x08), std::ldexp(1.0f, -6));
  EXPECT_EQ(ue4m3_to_float(0x38), 1.0f);
}

TEST(Ue4m3, EncodeOfDecodeIsIdentity) {
  for (int b = 0; b <= 0x7E; ++b) {
    EXPECT_EQ(float_to_ue4m3(ue4m3_to_float(static_cast<uint8_t>(b))), b) << "byte " << b;
  }
}

// Midpoints between adjacent codes (including the subnormal/normal seam at
// 0x07/0x08 and the step between exponents) go to the code with an even
// mantissa bit; a hair off the midpoint goes to the nearer one.
TEST(Ue4m3, TiesBetweenNeighboursGoToEven) {
  for (int b = 0; b < 0x7E; ++b) {
    const double lo = ue4m3_formula(b);
    const double hi = ue4m3_formula(b + 1);
    const double mid = 0.5 * (lo + hi);
    const float midf = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(midf), mid) << "midpoint must be an exact float";
    const int even = (b % 2 == 0) ? b : b + 1;
    EXPECT_EQ(float_to_ue4m3(midf), even) << "midpoint of " << b << " and " << b + 1;
    EXPECT_EQ(float_to_ue4m3(std::nextafter(midf, 0.0f)), b) << "just below midpoint of " << b;
    EXPECT_EQ(float_to_ue4m3(std::nextafter(midf, 1e9f)), b + 1) << "just above midpoint of " << b;
  }
}

TEST(Ue4m3, NearestOnARandomLogSweep) {
  std::mt19937_64 rng(testing::test_seed());
  std::uniform_real_distribution<double> log2_dist(-14.0, 9.5);
  for (int i = 0; i < 20000; ++i) {
    const float x = static_cast<float>(std::exp2(log2_dist(rng)));
    const uint8_t code = float_to_ue4m3(x);
    ASSERT_LE(code, 0x7E);
    const double err = std::fabs(ue4m3_formula(code) - std::fmin(static_cast<double>(x), 448.0));
    for (int b = 0; b <= 0x7E; ++b) {
      ASSERT_LE(err, std::fabs(ue4m3_formula(b) - std::fmin(static_cast<double>(x), 448.0)))
          << "x = " << x << " code " << int(code) << " vs " << b;
    }
  }
}

TEST(Ue4m3, SubnormalsAndUnderflow) {
  const float sub = std::ldexp(1.0f, -9);
  EXPECT_EQ(float_to_ue4m3(sub), 0x01);
  EXPECT_EQ(float_to_ue4m3(3 * sub), 0x03);
  EXPECT_EQ(float_to_ue4m3(7 * sub), 0x07);
  EXPECT_EQ(float_to_ue4m3(0.5f * sub), 0x00);                         // tie with 0 -> 0
  EXPECT_EQ(float_to_ue4m3(std::nextafter(0.5f * sub, 1.0f)), 0x01);  // above the tie
  EXPECT_EQ(float_to_ue4m3(1.5f * sub), 0x02);                         // tie 1|2 -> 2
  EXPECT_EQ(float_to_ue4m3(2.5f * sub), 0x02);                         // tie 2|3 -> 2
  EXPECT_EQ(float_to_ue4m3(7.5f * sub), 0x08);                         // tie 7|8 -> 8 (2^-6)
  EXPECT_EQ(float_to_ue4m3(std::ldexp(1.0f, -12)), 0x00);
  EXPECT_EQ(float_to_ue4m3(1e-30f), 0x00);
  EXPECT_EQ(float_to_ue4m3(std::numeric_limits<float>::denorm_min()), 0x00);
}

TEST(Ue4m3, SaturatesAndRejectsNonPositive) {
  EXPECT_EQ(float_to_ue4m3(448.0f), 0x7E);
  EXPECT_EQ(float_to_ue4m3(464.0f), 0x7E);  // the 448|480 midpoint would be 0x7F
  EXPECT_EQ(float_to_ue4m3(479.0f), 0x7E);
  EXPECT_EQ(float_to_ue4m3(500.0f), 0x7E);
  EXPECT_EQ(float_to_ue4m3(1e30f), 0x7E);
  EXPECT_EQ(float_to_ue4m3(std::numeric_limits<float>::max()), 0x7E);
  EXPECT_EQ(float_to_ue4m3(std::numeric_limits<float>::infinity()), 0x7E);
  EXPECT_EQ(float_to_ue4m3(0.0f), 0x00);
  EXPECT_EQ(float_to_ue4m3(-0.0f), 0x00);
  EXPECT_EQ(float_to_ue4m3(-1.0f), 0x00);
  EXPECT_EQ(float_to_ue4m3(-std::numeric_limits<float>::infinity()), 0x00);
  EXPECT_EQ(float_to_ue4m3(std::numeric_limits<float>::quiet_NaN()), 0x00);
}

TEST(Ue4m3, NeverEmitsTheNanPattern) {
  for (uint32_t bits = 0; bits < 0x7F800000u; bits += 4093u) {  // a stride through all positive floats
    const uint8_t code = float_to_ue4m3(std::bit_cast<float>(bits));
    ASSERT_LE(code, 0x7E) << "bits " << bits;
  }
}

TEST(Bf16, RoundTripAndNearestEvenTies) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(bf16_to_float(0x3F80), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3F80);
  // 1 + 3 * 2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even).
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3F82);
  EXPECT_EQ(float_to_bf16(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3F81);
  EXPECT_EQ(float_to_bf16(-1.0f - std::ldexp(1.0f, -8)), 0xBF80);
  EXPECT_EQ(float_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7F80);
  // The largest float rounds up to infinity (correct RNE overflow).
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::max()), 0x7F80);
  for (uint32_t hi = 0; hi < 0x10000u; ++hi) {
    const uint16_t b = static_cast<uint16_t>(hi);
    const float f = bf16_to_float(b);
    if (std::isnan(f)) continue;
    ASSERT_EQ(float_to_bf16(f), b) << "bf16 " << hi;
  }
}

TEST(Bf16, NanStaysQuietNan) {
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // A signalling NaN whose payload is only in the low 16 bits.
  const float snan = std::bit_cast<float>(0x7F800001u);
  ASSERT_TRUE(std::isnan(snan));
  const uint16_t b = float_to_bf16(snan);
  EXPECT_TRUE(std::isnan(bf16_to_float(b)));
  EXPECT_NE(b & 0x0040, 0);
  const float neg_nan = std::bit_cast<float>(0xFFC00000u);
  EXPECT_EQ(float_to_bf16(neg_nan) & 0x8000, 0x8000);
}

TEST(Bf16, NearestOnARandomSweep) {
  std::mt19937_64 rng(testing::test_seed());
  std::uniform_int_distribution<uint32_t> bits_dist(0, 0x7F7FFFFFu);
  for (int i = 0; i < 100000; ++i) {
    const uint32_t bits = bits_dist(rng);
    const float x = std::bit_cast<float>(bits);
    const uint16_t down = static_cast<uint16_t>(bits >> 16);
    const uint16_t up = static_cast<uint16_t>(down + 1);
    const double dx = x;
    const double err_down = dx - bf16_to_float(down);
    // Above the largest finite BF16 the next step is 2^128 (IEEE overflow
    // rounds as if the exponent were unbounded, then gives infinity).
    const double up_value = up == 0x7F80 ? std::ldexp(1.0, 128) : static_cast<double>(bf16_to_float(up));
    const double err_up = up_value - dx;
    const uint16_t expected = err_down < err_up ? down : err_up < err_down ? up : ((down & 1) ? up : down);
    ASSERT_EQ(float_to_bf16(x), expected) << "bits " << bits;
  }
}

// E2M1 * UE4M3 has at most 2 + 4 significant bits and exponents within
// BF16's range, so the product must survive a BF16 round trip exactly: the
// reason the exact path can feed BF16 tensor cores.
TEST(Bf16, E2m1TimesUe4m3IsExactInBf16) {
  for (int c = 0; c < 16; ++c) {
    for (int s = 0; s < 256; ++s) {
      const double scale = ue4m3_formula(s);
      if (std::isnan(scale)) continue;
      const double exact = e2m1_formula(c) * scale;
      const float product = e2m1_to_float(static_cast<uint8_t>(c)) * ue4m3_to_float(static_cast<uint8_t>(s));
      ASSERT_EQ(static_cast<double>(product), exact) << c << " x " << s;
      ASSERT_EQ(static_cast<double>(round_to_bf16(product)), exact) << c << " x " << s;
    }
  }
}

}  // namespace
}  // namespace nvfp4moe
