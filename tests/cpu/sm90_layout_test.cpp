// The sm90 packed layout: lossless round trip, and a host emulation of the
// device's bit tricks (dequant.cuh) proving they decode every code and scale
// exactly. The emulation is the same algebra the kernel runs, in integers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <set>

#include "format/sm90_fragment.hpp"
#include "nvfp4moe/layout.hpp"
#include "test_util.hpp"

namespace nvfp4moe {
namespace {

float bf16_bits_to_float(uint32_t bits16) {
  const uint32_t f = bits16 << 16;
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}

TEST(Sm90Layout, RoundTripIsLossless) {
  std::mt19937_64 rng(testing::test_seed());
  const int64_t E = 3, N = 128, K = 192;
  std::vector<uint8_t> codes(E * N * K / 2), scales(E * N * K / 16);
  for (auto& c : codes) c = uint8_t(rng());
  for (auto& s : scales) s = uint8_t(rng() % 0x7F);
  ExpertWeightsView w{E, N, K, codes.data(), scales.data(), nullptr};
  std::vector<uint8_t> packed(size_t(sm90_packed_bytes(E, N, K)));
  ASSERT_EQ(packed.size(), size_t(E * (N / 64) * (K / 64) * kSm90ChunkBytes));
  ASSERT_TRUE(pack_sm90(w, packed.data()).ok());
  std::vector<uint8_t> codes2(codes.size(), 0xAA), scales2(scales.size(), 0xAA);
  ASSERT_TRUE(unpack_sm90(packed.data(), E, N, K, codes2.data(), scales2.data()).ok());
  EXPECT_EQ(codes, codes2);
  EXPECT_EQ(scales, scales2);
}

TEST(Sm90Layout, FragmentSlotsAreABijection) {
  std::set<std::tuple<int, int, int, int>> seen;
  for (int r = 0; r < 64; ++r)
    for (int k = 0; k < 64; ++k) {
      const sm90::FragmentSlot s = sm90::fragment_slot(r, k);
      ASSERT_TRUE(seen.insert({s.thread, s.step, s.pair, s.half}).second) << r << "," << k;
    }
  uint32_t all = 0;
  for (int p = 0; p < 4; ++p)
    for (int h = 0; h < 2; ++h) {
      const sm90::NibbleBits b = sm90::nibble_bits(p, h);
      for (uint8_t bit : {b.sign, b.e1, b.e0, b.m}) {
        ASSERT_EQ(all & (1u << bit), 0u) << "bit " << int(bit) << " used twice";
        all |= 1u << bit;
      }
    }
  EXPECT_EQ(all, 0xFFFFFFFFu);
}

TEST(Sm90Layout, BadShapesAreRefused) {
  EXPECT_LT(sm90_packed_bytes(1, 96, 64), 0);
  EXPECT_LT(sm90_packed_bytes(1, 64, 32), 0);
  uint8_t dummy[16];
  ExpertWeightsView w{1, 96, 64, dummy, dummy, nullptr};
  EXPECT_EQ(pack_sm90(w, dummy).code(), StatusCode::kInvalidArgument);
  w.rows = 64;
  w.codes = nullptr;
  EXPECT_EQ(pack_sm90(w, dummy).code(), StatusCode::kInvalidArgument);
}

// The register decode of dequant.cuh, in host integers: each pair's bf16x2
// is (word << shift) & mask (p3: three shifts), giving e2m1 * 2^-126.
uint32_t emulate_pair(uint32_t word, int p) {
  constexpr uint32_t kMask = 0x81C081C0u;
  switch (p) {
    case 0: return word & kMask;
    case 1: return (word << 3) & kMask;
    case 2: return (word << 6) & kMask;
    default: return ((word << 1) & 0x80008000u) | ((word >> 5) & 0x01000100u) | ((word >> 4) & 0x00C000C0u);
  }
}

TEST(Sm90Layout, RegisterDecodeEmulationIsExact) {
  for (int p = 0; p < 4; ++p)
    for (int h = 0; h < 2; ++h)
      for (uint32_t code = 0; code < 16; ++code) {
        const uint32_t word = sm90::place_code(code, sm90::nibble_bits(p, h));
        const uint32_t pair = emulate_pair(word, p);
        const float got = bf16_bits_to_float((pair >> (16 * h)) & 0xFFFF) * std::ldexp(1.0f, 126);
        const float want = e2m1_to_float(uint8_t(code));
        EXPECT_EQ(got, want) << "pair " << p << " half " << h << " code " << code;
        EXPECT_EQ(std::signbit(got), std::signbit(want));
        EXPECT_EQ((pair >> (16 * (1 - h))) & 0xFFFF, 0u) << "bits leak into the other half";
      }
  // Scales: (word << 4) & 0x07F007F0 puts byte0 / byte2 (and >> 4 bytes 1 / 3)
  // in bf16 halves worth S * 2^-120, for every non-NaN UE4M3 byte.
  for (uint32_t b = 0; b < 0x7F; ++b) {
    const float want = ue4m3_to_float(uint8_t(b));
    const uint32_t even = ((b | (b << 16)) << 4) & 0x07F007F0u;
    const uint32_t odd = (((b << 8) | (b << 24)) >> 4) & 0x07F007F0u;
    for (uint32_t v : {even, odd}) {
      EXPECT_EQ(bf16_bits_to_float(v & 0xFFFF) * std::ldexp(1.0f, 120), want) << b;
      EXPECT_EQ(bf16_bits_to_float(v >> 16) * std::ldexp(1.0f, 120), want) << b;
    }
  }
}

}  // namespace
}  // namespace nvfp4moe
