// Quantizer tests. The reference "plain amax/6 rule" and all error sums are
// computed here, in double, independently of the library's quantizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "nvfp4moe/format.hpp"
#include "test_util.hpp"

namespace nvfp4moe {
namespace {

constexpr double kMagnitudes[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

// Nearest E2M1 magnitude to a / step by exhaustive search, ties to the even
// code; step == 0 gives 0.
double nearest_on_grid(double a, double step) {
  if (step == 0.0) return 0.0;
  int best = 0;
  for (int c = 1; c < 8; ++c) {
    const double d = std::fabs(a - kMagnitudes[c] * step), db = std::fabs(a - kMagnitudes[best] * step);
    if (d < db || (d == db && c % 2 == 0)) best = c;
  }
  return kMagnitudes[best] * step;
}

double reference_alpha(const float* expert, int64_t n, bool global_scale) {
  if (!global_scale) return 1.0;
  double amax = 0.0;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(static_cast<double>(expert[i])));
  const float alpha = static_cast<float>(amax / (6.0 * 448.0));
  return alpha > 0.0f ? alpha : 1.0;
}

// Squared error of one 16-value block under the plain rule: scale =
// UE4M3(amax / 6 / alpha), elements rounded to nearest.
double plain_rule_block_error(const float* x, double alpha) {
  double amax = 0.0;
  for (int i = 0; i < kScaleBlock; ++i) amax = std::max(amax, std::fabs(static_cast<double>(x[i])));
  const double step = static_cast<double>(ue4m3_to_float(float_to_ue4m3(static_cast<float>(amax / 6.0 / alpha)))) *
                      alpha;
  double err = 0.0;
  for (int i = 0; i < kScaleBlock; ++i) {
    const double a = std::fabs(static_cast<double>(x[i]));
    const double d = a - nearest_on_grid(a, step);
    err += d * d;
  }
  return err;
}

// Dequantized value in double straight from the canonical layout.
double dequantized(const ExpertWeights& q, int64_t index) {
  const int64_t e = index / (q.rows * q.cols);
  const uint8_t byte = q.codes[index / 2];
  const uint8_t nibble = index % 2 == 0 ? (byte & 0x0F) : (byte >> 4);
  return static_cast<double>(e2m1_to_float(nibble)) * ue4m3_to_float(q.scales[index / kScaleBlock]) * q.alpha[e];
}

// N(0, 0.02) with ~0.1% outliers of 10x, like trained FFN weights.
std::vector<float> real_like_weights(std::mt19937_64& rng, int64_t n) {
  std::vector<float> w = testing::random_normal(rng, n, 0.02f);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (auto& x : w) {
    if (u(rng) < 0.001) x *= 10.0f;
  }
  return w;
}

void expect_never_worse_than_plain_rule(bool global_scale) {
  std::mt19937_64 rng(testing::test_seed());
  const int64_t E = 3, N = 48, K = 512;
  const std::vector<float> w = real_like_weights(rng, E * N * K);
  ExpertWeights q;
  ASSERT_TRUE(quantize_experts(w.data(), E, N, K, {global_scale}, &q).ok());
  ASSERT_EQ(q.num_experts, E);
  ASSERT_EQ(q.rows, N);
  ASSERT_EQ(q.cols, K);
  ASSERT_EQ(q.codes.size(), static_cast<size_t>(E * N * K / 2));
  ASSERT_EQ(q.scales.size(), static_cast<size_t>(E * N * K / 16));
  ASSERT_EQ(q.alpha.size(), static_cast<size_t>(E));

  double err_ours = 0.0, err_plain = 0.0, energy = 0.0;
  for (int64_t e = 0; e < E; ++e) {
    const double alpha = reference_alpha(w.data() + e * N * K, N * K, global_scale);
    ASSERT_EQ(static_cast<double>(q.alpha[e]), alpha) << "expert " << e;
    for (int64_t b = e * N * K / kScaleBlock; b < (e + 1) * N * K / kScaleBlock; ++b) {
      ASSERT_LE(q.scales[b], 0x7E) << "block " << b;
      const float* x = w.data() + b * kScaleBlock;
      double block_ours = 0.0;
      const double step = static_cast<double>(ue4m3_to_float(q.scales[b])) * alpha;
      for (int i = 0; i < kScaleBlock; ++i) {
        const double v = dequantized(q, b * kScaleBlock + i);
        // Every element is the nearest grid point for the chosen scale.
        ASSERT_EQ(std::fabs(v), nearest_on_grid(std::fabs(static_cast<double>(x[i])), step))
            << "element " << b * kScaleBlock + i;
        if (v != 0.0) ASSERT_EQ(std::signbit(v), std::signbit(x[i]));
        block_ours += (x[i] - v) * (x[i] - v);
        energy += static_cast<double>(x[i]) * x[i];
      }
      const double block_plain = plain_rule_block_error(x, alpha);
      ASSERT_LE(block_ours, block_plain * (1.0 + 1e-12)) << "block " << b;
      err_ours += block_ours;
      err_plain += block_plain;
    }
  }
  const double rel_ours = err_ours / energy, rel_plain = err_plain / energy;
  std::printf("[ info     ] global_scale=%d relative squared error: ours %.6g, plain amax/6 %.6g\n",
              int(global_scale), rel_ours, rel_plain);
  EXPECT_LE(rel_ours, rel_plain);
  // NVFP4 on Gaussian-like data sits around 1e-2; far above that is a bug.
  EXPECT_LT(rel_ours, 0.03);
}

TEST(Quantize, NeverWorseThanPlainRuleWithGlobalScale) { expect_never_worse_than_plain_rule(true); }
TEST(Quantize, NeverWorseThanPlainRuleWithoutGlobalScale) { expect_never_worse_than_plain_rule(false); }

// Values on the NVFP4 grid whose every block contains a ±6 code quantize back
// to themselves: the plain scale is then the block's scale exactly.
TEST(Quantize, RepresentableWeightsRoundTripExactly) {
  std::mt19937_64 rng(testing::test_seed());
  const int64_t E = 2, N = 8, K = 256;
  std::uniform_int_distribution<int> code_dist(0, 15), scale_dist(0x01, 0x7E), pos_dist(0, 15);
  std::vector<float> w(E * N * K);
  std::vector<uint8_t> scales(E * N * K / kScaleBlock);
  for (size_t b = 0; b < scales.size(); ++b) {
    scales[b] = static_cast<uint8_t>(scale_dist(rng));
    const float s = ue4m3_to_float(scales[b]);
    for (int i = 0; i < kScaleBlock; ++i) w[b * kScaleBlock + i] = e2m1_to_float(static_cast<uint8_t>(code_dist(rng))) * s;
    w[b * kScaleBlock + pos_dist(rng)] = (code_dist(rng) & 8 ? -6.0f : 6.0f) * s;
  }
  ExpertWeights q;
  ASSERT_TRUE(quantize_experts(w.data(), E, N, K, {false}, &q).ok());
  EXPECT_EQ(q.scales, scales);
  std::vector<float> back(w.size());
  testing::poison(back);
  ASSERT_TRUE(dequantize_experts(q.view(), true, back.data()).ok());
  for (size_t i = 0; i < w.size(); ++i) ASSERT_EQ(back[i], w[i]) << "element " << i;
}

TEST(Quantize, Bf16InputMatchesWidenedF32Input) {
  std::mt19937_64 rng(testing::test_seed());
  const int64_t E = 2, N = 16, K = 192;
  const std::vector<float> w = real_like_weights(rng, E * N * K);
  std::vector<uint16_t> w_bf16(w.size());
  std::vector<float> widened(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    w_bf16[i] = float_to_bf16(w[i]);
    widened[i] = bf16_to_float(w_bf16[i]);
  }
  for (const bool global_scale : {true, false}) {
    ExpertWeights from_bf16, from_f32;
    ASSERT_TRUE(quantize_experts_bf16(w_bf16.data(), E, N, K, {global_scale}, &from_bf16).ok());
    ASSERT_TRUE(quantize_experts(widened.data(), E, N, K, {global_scale}, &from_f32).ok());
    EXPECT_EQ(from_bf16.codes, from_f32.codes);
    EXPECT_EQ(from_bf16.scales, from_f32.scales);
    EXPECT_EQ(from_bf16.alpha, from_f32.alpha);
  }
}

// Large enough to run on several threads; quantizing each expert alone (one
// thread) must give the same bytes.
TEST(Quantize, ThreadedResultEqualsPerExpertResult) {
  std::mt19937_64 rng(testing::test_seed());
  const int64_t E = 4, N = 128, K = 1024;
  const std::vector<float> w = real_like_weights(rng, E * N * K);
  ExpertWeights all;
  ASSERT_TRUE(quantize_experts(w.data(), E, N, K, {true}, &all).ok());
  for (int64_t e = 0; e < E; ++e) {
    ExpertWeights one;
    ASSERT_TRUE(quantize_experts(w.data() + e * N * K, 1, N, K, {true}, &one).ok());
    EXPECT_EQ(one.alpha[0], all.alpha[e]);
    EXPECT_TRUE(std::equal(one.codes.begin(), one.codes.end(), all.codes.begin() + e * N * K / 2)) << "expert " << e;
    EXPECT_TRUE(std::equal(one.scales.begin(), one.scales.end(), all.scales.begin() + e * N * K / 16))
        << "expert " << e;
  }
}

TEST(Quantize, ZeroExpertAndZeroBlocks) {
  const int64_t E = 2, N = 2, K = 64;
  std::vector<float> w(E * N * K, 0.0f);
  w[N * K + 5] = 1.0f;  // expert 1 has one non-zero value; its other blocks are zero
  ExpertWeights q;
  ASSERT_TRUE(quantize_experts(w.data(), E, N, K, {true}, &q).ok());
  EXPECT_EQ(q.alpha[0], 1.0f);
  EXPECT_EQ(q.alpha[1], static_cast<float>(1.0 / 2688.0));
  for (int64_t i = 0; i < N * K / 16; ++i) EXPECT_EQ(q.scales[i], 0) << i;
  EXPECT_EQ(q.scales[N * K / 16], 0x7E);
  EXPECT_EQ(q.scales[N * K / 16 + 1], 0);
  std::vector<float> back(w.size());
  ASSERT_TRUE(dequantize_experts(q.view(), true, back.data()).ok());
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(std::fabs(back[i] - w[i]) < 1e-6f, true) << i;
}

TEST(Quantize, RejectsNonFiniteInputNamingThePosition) {
  const int64_t E = 2, N = 3, K = 64;
  std::vector<float> w(E * N * K, 0.5f);
  w[(1 * N + 2) * K + 17] = std::numeric_limits<float>::quiet_NaN();
  ExpertWeights q;
  q.num_experts = 99;
  Status s = quantize_experts(w.data(), E, N, K, {}, &q);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("w[1][2][17] = nan"), std::string::npos) << s.message();
  EXPECT_EQ(q.num_experts, 99) << "out must be untouched on error";

  w[(1 * N + 2) * K + 17] = 0.5f;
  w[(0 * N + 1) * K + 3] = -std::numeric_limits<float>::infinity();
  s = quantize_experts(w.data(), E, N, K, {}, &q);
  EXPECT_NE(s.message().find("w[0][1][3] = -inf"), std::string::npos) << s.message();

  std::vector<uint16_t> wb(E * N * K, float_to_bf16(0.5f));
  wb[K + 1] = 0x7FC0;
  s = quantize_experts_bf16(wb.data(), E, N, K, {}, &q);
  EXPECT_NE(s.message().find("w[0][1][1] = nan"), std::string::npos) << s.message();
}

TEST(Quantize, RejectsBadArguments) {
  std::vector<float> w(128, 0.0f);
  ExpertWeights q;
  Status s = quantize_experts(w.data(), 1, 1, 96, {}, &q);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("cols = 96"), std::string::npos) << s.message();
  EXPECT_NE(quantize_experts(nullptr, 1, 1, 64, {}, &q).message().find("w is null"), std::string::npos);
  EXPECT_NE(quantize_experts(w.data(), 1, 1, 64, {}, nullptr).message().find("out is null"), std::string::npos);
  EXPECT_NE(quantize_experts(w.data(), 0, 1, 64, {}, &q).message().find("num_experts = 0"), std::string::npos);
  EXPECT_NE(quantize_experts(w.data(), 1, -2, 64, {}, &q).message().find("rows = -2"), std::string::npos);
  EXPECT_EQ(quantize_experts(w.data(), int64_t{1} << 40, int64_t{1} << 20, 64, {}, &q).code(),
            StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace nvfp4moe
