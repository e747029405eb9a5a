// Layout tests: ggml block_nvfp4 <-> canonical, exact dequantization of both,
// and the gate/up row interleave.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "nvfp4moe/format.hpp"
#include "nvfp4moe/layout.hpp"
#include "test_util.hpp"

namespace nvfp4moe {
namespace {

std::vector<uint8_t> random_bytes(std::mt19937_64& rng, size_t n) {
  std::uniform_int_distribution<int> d(0, 255);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(d(rng));
  return v;
}

// Scale bytes that decode to finite non-negative values (no 0x7F/0xFF, no sign).
std::vector<uint8_t> random_scales(std::mt19937_64& rng, size_t n) {
  std::uniform_int_distribution<int> d(0, 0x7E);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(d(rng));
  return v;
}

// Value k of a canonical row, read straight from the documented layout.
double canonical_value(const uint8_t* codes, const uint8_t* scales, int64_t k) {
  const uint8_t byte = codes[k / 2];
  const uint8_t nibble = (k % 2 == 0) ? (byte & 0x0F) : (byte >> 4);
  return static_cast<double>(e2m1_to_float(nibble)) * ue4m3_to_float(scales[k / kScaleBlock]);
}

// Value k of a ggml row, read straight from the block_nvfp4 description.
double ggml_value(const BlockNvfp4* row_blocks, int64_t k) {
  const BlockNvfp4& b = row_blocks[k / kGgmlBlockValues];
  const int v = static_cast<int>(k % kGgmlBlockValues);
  const int s = v / 16, within = v % 16;
  const uint8_t byte = b.qs[8 * s + within % 8];
  const uint8_t nibble = within < 8 ? (byte & 0x0F) : (byte >> 4);
  return static_cast<double>(e2m1_to_float(nibble)) * ue4m3_to_float(b.d[s]);
}

TEST(GgmlLayout, HandBuiltBlockHasTheDocumentedNibbleOrder) {
  // Canonical row of 64 values: value v gets code v % 16 and sub-block s gets
  // scale byte 0x38 + s (1.0, 1.125, 1.25, 1.375).
  uint8_t codes[32], scales[4];
  for (int i = 0; i < 32; ++i) codes[i] = static_cast<uint8_t>(((2 * i) % 16) | (((2 * i + 1) % 16) << 4));
  for (int s = 0; s < 4; ++s) scales[s] = static_cast<uint8_t>(0x38 + s);
  BlockNvfp4 block;
  std::memset(&block, 0xAB, sizeof block);
  ASSERT_TRUE(canonical_to_ggml(codes, scales, 1, 64, &block).ok());
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(block.d[s], 0x38 + s);
    for (int j = 0; j < 8; ++j) {
      // value 16s+j has code j (low nibble), value 16s+j+8 has code j+8 (high).
      EXPECT_EQ(block.qs[8 * s + j], static_cast<uint8_t>(j | ((j + 8) << 4))) << "s " << s << " j " << j;
    }
  }
  uint8_t codes_back[32], scales_back[4];
  ASSERT_TRUE(ggml_to_canonical(&block, 1, 64, codes_back, scales_back).ok());
  EXPECT_EQ(std::memcmp(codes_back, codes, 32), 0);
  EXPECT_EQ(std::memcmp(scales_back, scales, 4), 0);
}

TEST(GgmlLayout, RandomRoundTripIsBitExact) {
  std::mt19937_64 rng(testing::test_seed());
  const int64_t rows = 37, cols = 320;
  // All 256 byte values, the sign bit and NaN patterns included: the layout
  // conversion must not interpret them.
  const auto codes = random_bytes(rng, rows * cols / 2);
  const auto scales = random_bytes(rng, rows * cols / kScaleBlock);
  std::vector<BlockNvfp4> blocks(rows * cols / kGgmlBlockValues);
  ASSERT_TRUE(canonical_to_ggml(codes.data(), scales.data(), rows, cols, blocks.data()).ok());
  std::vector<uint8_t> codes_back(codes.size(), 0xCD), scales_back(scales.size(), 0xCD);
  ASSERT_TRUE(ggml_to_canonical(blocks.data(), rows, cols, codes_back.data(), scales_back.data()).ok());
  EXPECT_EQ(codes_back, codes);
  EXPECT_EQ(scales_back, scales);

  // And from random ggml bytes the other way.
  const auto raw = random_bytes(rng, blocks.size() * sizeof(BlockNvfp4));
  std::memcpy(blocks.data(), raw.data(), raw.size());
  ASSERT_TRUE(ggml_to_canonical(blocks.data(), rows, cols, codes_back.data(), scales_back.data()).ok());
  std::vector<BlockNvfp4> blocks_back(blocks.size());
  ASSERT_TRUE(canonical_to_ggml(codes_back.data(), scales_back.data(), rows, cols, blocks_back.data()).ok());
  EXPECT_EQ(std::memcmp(blocks_back.data(), raw.data(), raw.size()), 0);
}

TEST(GgmlLayout, DequantizedValuesMatchThePerValueFormula) {
  std::mt19937_64 rng(testing::test_seed());
  const int64_t rows = 5, cols = 192;
  const auto raw = random_bytes(rng, rows * cols / kGgmlBlockValues * sizeof(BlockNvfp4));
  std::vector<BlockNvfp4> blocks(rows * cols / kGgmlBlockValues);
  std::memcpy(blocks.data(), raw.data(), raw.size());
  for (auto& b : blocks) {
    for (auto& d : b.d) d &= 0x7E;  // finite scales, so values compare with ==
  }
  std::vector<uint8_t> codes(rows * cols / 2), scales(rows * cols / kScaleBlock);
  ASSERT_TRUE(ggml_to_canonical(blocks.data(), rows, cols, codes.data(), scales.data()).ok());
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    testing::poison(row);
    dequantize_row(codes.data() + r * cols / 2, scales.data() + r * cols / kScaleBlock, cols, row.data());
    const BlockNvfp4* row_blocks = blocks.data() + r * (cols / kGgmlBlockValues);
    for (int64_t k = 0; k < cols; ++k) {
      ASSERT_EQ(static_cast<double>(row[k]), ggml_value(row_blocks, k)) << "row " << r << " k " << k;
    }
  }
}

TEST(FormatDequantize, RowIsExactAndNanScalesPropagate) {
  std::mt19937_64 rng(testing::test_seed());
  const int64_t cols = 256;
  const auto codes = random_bytes(rng, cols / 2);
  auto scales = random_scales(rng, cols / kScaleBlock);
  std::vector<float> row(cols);
  testing::poison(row);
  dequantize_row(codes.data(), scales.data(), cols, row.data());
  for (int64_t k = 0; k < cols; ++k) {
    ASSERT_EQ(static_cast<double>(row[k]), canonical_value(codes.data(), scales.data(), k)) << "k " << k;
  }
  scales[3] = 0x7F;
  dequantize_row(codes.data(), scales.data(), cols, row.data());
  for (int64_t k = 0; k < cols; ++k) EXPECT_EQ(std::isnan(row[k]), k / kScaleBlock == 3) << "k " << k;
}

TEST(FormatDequantize, ExpertsApplyAlphaOnRequest) {
  std::mt19937_64 rng(testing::test_seed());
  ExpertWeights w;
  w.num_experts = 3;
  w.rows = 4;
  w.cols = 128;
  w.codes = random_bytes(rng, w.num_experts * w.rows * w.cols / 2);
  w.scales = random_scales(rng, w.num_experts * w.rows * w.cols / kScaleBlock);
  w.alpha = {0.5f, 3.0f, 0.0f};
  const int64_t n = w.num_experts * w.rows * w.cols;
  std::vector<float> plain(n), scaled(n);
  testing::poison(plain);
  testing::poison(scaled);
  ASSERT_TRUE(dequantize_experts(w.view(), false, plain.data()).ok());
  ASSERT_TRUE(dequantize_experts(w.view(), true, scaled.data()).ok());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t e = i / (w.rows * w.cols), r = (i / w.cols) % w.rows, k = i % w.cols;
    const int64_t row = e * w.rows + r;
    const double v = canonical_value(w.codes.data() + row * w.cols / 2, w.scales.data() + row * w.cols / 16, k);
    ASSERT_EQ(static_cast<double>(plain[i]), v) << "element " << i;
    ASSERT_EQ(scaled[i], static_cast<float>(v) * w.alpha[e]) << "element " << i;
  }
  std::vector<float> out(n);
  EXPECT_FALSE(dequantize_experts(w.view(), false, nullptr).ok());
  ExpertWeightsView bad = w.view();
  bad.cols = 100;
  EXPECT_FALSE(dequantize_experts(bad, false, out.data()).ok());
  bad = w.view();
  bad.codes = nullptr;
  EXPECT_FALSE(dequantize_experts(bad, false, out.data()).ok());
}

TEST(GgmlLayout, RejectsBadArguments) {
  std::vector<uint8_t> codes(64), scales(8);
  std::vector<BlockNvfp4> blocks(2);
  Status s = canonical_to_ggml(codes.data(), scales.data(), 1, 96, blocks.data());
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cols = 96"), std::string::npos) << s.message();
  s = ggml_to_canonical(blocks.data(), 1, 96, codes.data(), scales.data());
  EXPECT_NE(s.message().find("cols = 96"), std::string::npos) << s.message();
  s = ggml_to_canonical(nullptr, 1, 64, codes.data(), scales.data());
  EXPECT_NE(s.message().find("blocks is null"), std::string::npos) << s.message();
  s = ggml_to_canonical(blocks.data(), 1, 64, nullptr, scales.data());
  EXPECT_NE(s.message().find("codes is null"), std::string::npos) << s.message();
  s = canonical_to_ggml(codes.data(), nullptr, 1, 64, blocks.data());
  EXPECT_NE(s.message().find("scales is null"), std::string::npos) << s.message();
  s = canonical_to_ggml(codes.data(), scales.data(), 0, 64, blocks.data());
  EXPECT_NE(s.message().find("rows = 0"), std::string::npos) << s.message();
  s = canonical_to_ggml(codes.data(), scales.data(), 1, -64, blocks.data());
  EXPECT_NE(s.message().find("cols = -64"), std::string::npos) << s.message();
}

ExpertWeights random_weights(std::mt19937_64& rng, int64_t e, int64_t n, int64_t k) {
  ExpertWeights w;
  w.num_experts = e;
  w.rows = n;
  w.cols = k;
  w.codes = random_bytes(rng, e * n * k / 2);
  w.scales = random_scales(rng, e * n * k / kScaleBlock);
  w.alpha.assign(e, 1.0f);
  return w;
}

TEST(GateUpLayout, RowBlocksAlternateGateAndUp) {
  std::mt19937_64 rng(testing::test_seed());
  const int64_t E = 2, F = 192, K = 128;
  const ExpertWeights gate = random_weights(rng, E, F, K);
  const ExpertWeights up = random_weights(rng, E, F, K);
  ExpertWeights out;
  ASSERT_TRUE(interleave_gate_up(gate.view(), up.view(), &out).ok());
  ASSERT_EQ(out.num_experts, E);
  ASSERT_EQ(out.rows, 2 * F);
  ASSERT_EQ(out.cols, K);
  ASSERT_EQ(out.codes.size(), static_cast<size_t>(E * 2 * F * K / 2));
  ASSERT_EQ(out.scales.size(), static_cast<size_t>(E * 2 * F * K / 16));
  EXPECT_TRUE(out.alpha.empty());
  for (int64_t e = 0; e < E; ++e) {
    for (int64_t r = 0; r < 2 * F; ++r) {
      const int64_t block = r / 64;
      const ExpertWeights& src = (block % 2 == 0) ? gate : up;
      const int64_t src_row = (block / 2) * 64 + r % 64;
      const int64_t out_row = e * 2 * F + r, in_row = e * F + src_row;
      ASSERT_EQ(std::memcmp(out.codes.data() + out_row * K / 2, src.codes.data() + in_row * K / 2, K / 2), 0)
          << "expert " << e << " row " << r;
      ASSERT_EQ(std::memcmp(out.scales.data() + out_row * K / 16, src.scales.data() + in_row * K / 16, K / 16), 0)
          << "expert " << e << " row " << r;
    }
  }
}

TEST(GateUpLayout, RejectsMismatchedOrUnalignedShapes) {
  std::mt19937_64 rng(testing::test_seed());
  const ExpertWeights gate = random_weights(rng, 2, 64, 128);
  ExpertWeights out;
  const ExpertWeights other_rows = random_weights(rng, 2, 128, 128);
  Status s = interleave_gate_up(gate.view(), other_rows.view(), &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("same shape"), std::string::npos) << s.message();
  const ExpertWeights other_cols = random_weights(rng, 2, 64, 64);
  EXPECT_FALSE(interleave_gate_up(gate.view(), other_cols.view(), &out).ok());
  const ExpertWeights other_experts = random_weights(rng, 1, 64, 128);
  EXPECT_FALSE(interleave_gate_up(gate.view(), other_experts.view(), &out).ok());
  const ExpertWeights f96 = random_weights(rng, 2, 96, 128);
  s = interleave_gate_up(f96.view(), f96.view(), &out);
  EXPECT_NE(s.message().find("gate.rows = 96"), std::string::npos) << s.message();
  ExpertWeightsView null_codes = gate.view();
  null_codes.codes = nullptr;
  s = interleave_gate_up(gate.view(), null_codes, &out);
  EXPECT_NE(s.message().find("up.codes is null"), std::string::npos) << s.message();
  EXPECT_FALSE(interleave_gate_up(gate.view(), gate.view(), nullptr).ok());
}

}  // namespace
}  // namespace nvfp4moe
