// validate_weights: one test per kind of error, each checking that the message
// names the argument, the position and the value.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "nvfp4moe/format.hpp"

namespace nvfp4moe {
namespace {

// 3 experts x 4 rows x 128 cols of valid weights.
struct ValidWeights {
  ExpertWeights w;
  ValidWeights() {
    w.num_experts = 3;
    w.rows = 4;
    w.cols = 128;
    w.codes.assign(3 * 4 * 128 / 2, 0x5A);
    w.scales.assign(3 * 4 * 128 / 16, 0x38);
    w.alpha = {1.0f, 0.25f, 0.0f};
  }
};

void expect_error(const Status& s, StatusCode code, const std::string& fragment) {
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(fragment), std::string::npos) << "message \"" << s.message() << "\" lacks \""
                                                            << fragment << "\"";
}

TEST(FormatValidate, AcceptsValidWeights) {
  ValidWeights v;
  EXPECT_TRUE(validate_weights(v.w.view(), "w").ok());
  ExpertWeightsView no_alpha = v.w.view();
  no_alpha.alpha = nullptr;
  EXPECT_TRUE(validate_weights(no_alpha, "w").ok());
  // Every non-NaN, non-negative scale byte, 0x80 (-0) included, is accepted.
  for (int b = 0; b <= 0x80; ++b) {
    if (b == 0x7F) continue;
    v.w.scales[7] = static_cast<uint8_t>(b);
    EXPECT_TRUE(validate_weights(v.w.view(), "w").ok()) << "byte " << b;
  }
  v.w.alpha[0] = -0.0f;
  EXPECT_TRUE(validate_weights(v.w.view(), "w").ok());
}

TEST(FormatValidate, RejectsNullCodes) {
  ValidWeights v;
  ExpertWeightsView view = v.w.view();
  view.codes = nullptr;
  expect_error(validate_weights(view, "gate"), StatusCode::kInvalidArgument, "gate.codes is null");
}

TEST(FormatValidate, RejectsNullScales) {
  ValidWeights v;
  ExpertWeightsView view = v.w.view();
  view.scales = nullptr;
  expect_error(validate_weights(view, "down"), StatusCode::kInvalidArgument, "down.scales is null");
}

TEST(FormatValidate, RejectsNonPositiveSizes) {
  ValidWeights v;
  ExpertWeightsView view = v.w.view();
  view.num_experts = 0;
  expect_error(validate_weights(view, "w"), StatusCode::kInvalidArgument, "w.num_experts = 0");
  view = v.w.view();
  view.rows = -4;
  expect_error(validate_weights(view, "w"), StatusCode::kInvalidArgument, "w.rows = -4");
  view = v.w.view();
  view.cols = 0;
  expect_error(validate_weights(view, "w"), StatusCode::kInvalidArgument, "w.cols = 0");
}

TEST(FormatValidate, RejectsColsNotMultipleOf64) {
  ValidWeights v;
  ExpertWeightsView view = v.w.view();
  view.cols = 96;
  expect_error(validate_weights(view, "up"), StatusCode::kInvalidArgument, "up.cols = 96 is not a multiple of 64");
}

TEST(FormatValidate, RejectsUnaddressableSizes) {
  ValidWeights v;
  ExpertWeightsView view = v.w.view();
  view.num_experts = int64_t{1} << 30;
  view.rows = int64_t{1} << 30;
  expect_error(validate_weights(view, "w"), StatusCode::kOutOfRange, "w has num_experts x rows x cols");
}

TEST(FormatValidate, RejectsNanScaleWithPosition) {
  ValidWeights v;
  // expert 2, row 1, block 5: index (2 * 4 + 1) * 8 + 5.
  v.w.scales[(2 * 4 + 1) * 8 + 5] = 0x7F;
  expect_error(validate_weights(v.w.view(), "w"), StatusCode::kFormatError, "w.scales[2][1][5] = 0x7F");
  v.w.scales[(2 * 4 + 1) * 8 + 5] = 0x38;
  v.w.scales[0] = 0xFF;
  expect_error(validate_weights(v.w.view(), "w"), StatusCode::kFormatError, "w.scales[0][0][0] = 0xFF");
  // The first bad byte in memory order is the one reported.
  v.w.scales[0] = 0x38;
  v.w.scales[v.w.scales.size() - 1] = 0x7F;
  v.w.scales[9] = 0xFF;
  expect_error(validate_weights(v.w.view(), "w"), StatusCode::kFormatError, "w.scales[0][1][1] = 0xFF");
}

TEST(FormatValidate, RejectsNegativeScaleWithPosition) {
  ValidWeights v;
  v.w.scales[(1 * 4 + 3) * 8 + 7] = 0xB8;  // -1.0 in float8_e4m3fn
  const Status s = validate_weights(v.w.view(), "w");
  expect_error(s, StatusCode::kFormatError, "w.scales[1][3][7] = 0xB8");
  EXPECT_NE(s.message().find("negative"), std::string::npos) << s.message();
  v.w.scales[(1 * 4 + 3) * 8 + 7] = 0x81;
  expect_error(validate_weights(v.w.view(), "w"), StatusCode::kFormatError, "w.scales[1][3][7] = 0x81");
}

TEST(FormatValidate, RejectsBadScaleAtTheEndOfALongTensor) {
  // Past the scanner's first chunks, and at the very last byte.
  ExpertWeights w;
  w.num_experts = 5;
  w.rows = 300;
  w.cols = 1024;
  w.codes.assign(5 * 300 * 1024 / 2, 0);
  w.scales.assign(5 * 300 * 1024 / 16, 0x10);
  w.scales.back() = 0x7F;
  expect_error(validate_weights(w.view(), "w"), StatusCode::kFormatError, "w.scales[4][299][63] = 0x7F");
}

TEST(FormatValidate, RejectsNonFiniteAlpha) {
  ValidWeights v;
  v.w.alpha[1] = std::numeric_limits<float>::quiet_NaN();
  expect_error(validate_weights(v.w.view(), "w"), StatusCode::kFormatError, "w.alpha[1] = nan is not finite");
  v.w.alpha[1] = std::numeric_limits<float>::infinity();
  expect_error(validate_weights(v.w.view(), "w"), StatusCode::kFormatError, "w.alpha[1] = inf is not finite");
}

TEST(FormatValidate, RejectsNegativeAlpha) {
  ValidWeights v;
  v.w.alpha[2] = -0.5f;
  expect_error(validate_weights(v.w.view(), "w"), StatusCode::kFormatError, "w.alpha[2] = -0.5 is negative");
}

}  // namespace
}  // namespace nvfp4moe
