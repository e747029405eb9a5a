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

// pack_sm90 keeps every value: unpack returns the same codes and scales,
// except that a zero-scale block's codes come back as +0 and a -0 scale as
// 0x00 (the values are the same).
TEST(Sm90Layout, RoundTripKeepsEveryValue) {
  std::mt19937_64 rng(testing::test_seed());
  const int64_t E = 3, N = 128, K = 192;
  std::vector<uint8_t> codes(E * N * K / 2), scales(E * N * K / 16);
  for (auto& c : codes) c = uint8_t(rng());
  for (auto& s : scales) {
    const uint64_t r = rng();
    s = r % 16 == 0 ? 0x00 : r % 16 == 1 ? 0x80 : uint8_t((r >> 8) % 0x7F);
  }
  ExpertWeightsView w{E, N, K, codes.data(), scales.data(), nullptr};
  std::vector<uint8_t> packed(size_t(sm90_packed_bytes(E, N, K)));
  ASSERT_EQ(packed.size(), size_t(E * (N / 64) * (K / 64) * kSm90ChunkBytes));
  ASSERT_TRUE(pack_sm90(w, packed.data()).ok());
  std::vector<uint8_t> codes2(codes.size(), 0xAA), scales2(scales.size(), 0xAA);
  ASSERT_TRUE(unpack_sm90(packed.data(), E, N, K, codes2.data(), scales2.data()).ok());
  int64_t zero_blocks = 0;
  for (size_t b = 0; b < scales.size(); ++b) {
    const bool zero = (scales[b] & 0x7F) == 0;
    zero_blocks += zero;
    ASSERT_EQ(scales2[b], zero ? 0 : scales[b]) << "scale " << b;
    for (size_t i = b * 8; i < b * 8 + 8; ++i) ASSERT_EQ(codes2[i], zero ? 0 : codes[i]) << "code byte " << i;
  }
  EXPECT_GT(zero_blocks, 0) << "the draw must cover zero-scale blocks";
}

TEST(Sm90Layout, ScaleCodesMapEveryUe4m3ValueOneToOne) {
  std::set<int> codes_seen;
  for (int b = 0; b < 0x7F; ++b) {
    const uint8_t code = sm90::scale_code(uint8_t(b));
    ASSERT_LE(code, sm90::kScaleCodeMax) << b;
    ASSERT_TRUE(codes_seen.insert(code).second) << "two scales share code " << int(code);
    uint8_t back = 0xAA;
    ASSERT_TRUE(sm90::ue4m3_from_scale_code(code, &back)) << b;
    EXPECT_EQ(back, b);
  }
  int valid = 0;
  for (int c = 0; c < 256; ++c) {
    uint8_t u;
    valid += sm90::ue4m3_from_scale_code(uint8_t(c), &u);
  }
  EXPECT_EQ(valid, 0x7F) << "only the 127 codes of non-NaN scales decode";
}

TEST(Sm90Layout, BadScalesAndCodesAreRefused) {
  const int64_t E = 1, N = 64, K = 64;
  std::vector<uint8_t> codes(N * K / 2, 0x11), scales(N * K / 16, 0x38);
  std::vector<uint8_t> packed(size_t(sm90_packed_bytes(E, N, K)));
  ExpertWeightsView w{E, N, K, codes.data(), scales.data(), nullptr};
  scales[5] = 0x7F;  // NaN
  EXPECT_EQ(pack_sm90(w, packed.data()).code(), StatusCode::kFormatError);
  scales[5] = 0xB8;  // negative
  EXPECT_EQ(pack_sm90(w, packed.data()).code(), StatusCode::kFormatError);
  scales[5] = 0x38;
  ASSERT_TRUE(pack_sm90(w, packed.data()).ok());
  std::vector<uint8_t> codes2(codes.size()), scales2(scales.size());
  // 0x09 would be 2^-9 * 1.125, not a UE4M3 value; 0xFF is past the range.
  for (uint8_t bad : {uint8_t(0x09), uint8_t(0xFF)}) {
    std::vector<uint8_t> hostile = packed;
    hostile[kSm90ChunkCodeBytes + 17] = bad;
    EXPECT_EQ(unpack_sm90(hostile.data(), E, N, K, codes2.data(), scales2.data()).code(), StatusCode::kFormatError)
        << int(bad);
  }
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

TEST(Sm90Layout, RegisterDecodeEmulationIsExact) {
  for (int p = 0; p < 4; ++p)
    for (int h = 0; h < 2; ++h)
      for (uint32_t code = 0; code < 16; ++code) {
        const uint32_t word = sm90::place_code(code, sm90::nibble_bits(p, h));
        const uint32_t pair = sm90::pair_bf16x2_bits(word, p);  // dequant.cuh's decode, on the host
        const float got = bf16_bits_to_float((pair >> (16 * h)) & 0xFFFF) * std::ldexp(1.0f, 126);
        const float want = e2m1_to_float(uint8_t(code));
        EXPECT_EQ(got, want) << "pair " << p << " half " << h << " code " << code;
        EXPECT_EQ(std::signbit(got), std::signbit(want));
        EXPECT_EQ((pair >> (16 * (1 - h))) & 0xFFFF, 0u) << "bits leak into the other half";
      }
  // Scales: the device's prmt puts the code of byte j in both halves, then
  // code * 16 + kScaleCodeBias is bf16 S * 2^116 in each, for every
  // non-NaN UE4M3 byte in every byte position.
  for (uint32_t b = 0; b < 0x7F; ++b) {
    const float want = ue4m3_to_float(uint8_t(b)) * std::ldexp(1.0f, 116);
    const uint32_t code = sm90::scale_code(uint8_t(b));
    for (int j = 0; j < 4; ++j) {
      const uint32_t word = code << (8 * j) | 0x5Au << (8 * ((j + 1) % 4));  // a neighbour byte must not leak
      const uint32_t code_x2 = ((word >> (8 * j)) & 0xFF) * 0x00010001u;  // prmt(word, 0, 0x4j4j)
      const uint32_t v = code_x2 * 16u + (sm90::kScaleCodeBias | sm90::kScaleCodeBias << 16);
      if (b == 0) {
        EXPECT_TRUE(std::isfinite(bf16_bits_to_float(v & 0xFFFF))) << "zero blocks multiply +0 codes";
        continue;
      }
      EXPECT_EQ(bf16_bits_to_float(v & 0xFFFF), want) << b << " byte " << j;
      EXPECT_EQ(bf16_bits_to_float(v >> 16), want) << b << " byte " << j;
    }
  }
}

}  // namespace
}  // namespace nvfp4moe
