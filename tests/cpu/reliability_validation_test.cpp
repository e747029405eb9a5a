// Entry-point checks that docs/reliability.md lists and the older validation
// suites (cpu_validation_test, plan_test, format_*_test) do not cover:
// pointer alignment, non-finite inputs (not errors: they propagate) and the
// defined edge cases T = 0 and duplicate ids.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu_test_util.hpp"
#include "nvfp4moe/format.hpp"
#include "nvfp4moe/ops.hpp"
#include "nvfp4moe/plan.hpp"

namespace nvfp4moe {
namespace {

using testing::test_seed;

void expect_error(const Status& s, StatusCode code, const std::string& fragment) {
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(fragment), std::string::npos) << "message: " << s.message();
}

// A pointer one byte past p: misaligned for every element type wider than a
// byte. The ops must refuse it before dereferencing it.
template <typename T>
T* off_by_one(T* p) {
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(p) + 1);
}

constexpr int64_t kE = 4, kN = 64, kK = 128, kT = 3, kTopK = 2;

class ReliabilityMulMatId : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(test_seed());
    w_ = testing::quantized_weights(rng, kE, kN, kK);
    x_ = testing::random_normal(rng, (kT * kTopK + 1) * kK, 1.0f);  // room for per-slot rows and the +1 shift
    ids_ = {0, 1, 2, 3, 1, 0, 0};
    y_.assign(kT * kTopK * kN + 1, 0.0f);
    a_.weights = w_.view();
    a_.x = x_.data();
    a_.ids = ids_.data();
    a_.num_tokens = kT;
    a_.top_k = kTopK;
    a_.y = y_.data();
  }

  void expect_refused(const MulMatIdArgs& a, const std::string& fragment) {
    expect_error(validate_mul_mat_id(a), StatusCode::kInvalidArgument, fragment);
    expect_error(mul_mat_id_cpu(a), StatusCode::kInvalidArgument, fragment);
    std::vector<double> ref(y_.size());
    expect_error(mul_mat_id_reference(a, ref.data()), StatusCode::kInvalidArgument, fragment);
  }

  ExpertWeights w_;
  std::vector<float> x_, y_;
  std::vector<int32_t> ids_;
  MulMatIdArgs a_;
};

TEST_F(ReliabilityMulMatId, MisalignedF32InputIsRefused) {
  a_.x = off_by_one(x_.data());
  expect_refused(a_, "is not 4-byte aligned (F32 elements)");
  expect_refused(a_, "x = ");
}

TEST_F(ReliabilityMulMatId, MisalignedBf16InputIsRefused) {
  std::vector<uint16_t> xb = testing::to_bf16(x_);
  a_.x_dtype = DType::kBF16;
  a_.x = xb.data() + 1;  // 2-byte aligned is enough for BF16
  EXPECT_TRUE(mul_mat_id_cpu(a_).ok());
  a_.x = off_by_one(xb.data());
  expect_refused(a_, "is not 2-byte aligned (BF16 elements)");
}

TEST_F(ReliabilityMulMatId, MisalignedOutputIsRefused) {
  a_.y = off_by_one(y_.data());
  expect_error(validate_mul_mat_id(a_), StatusCode::kInvalidArgument, "y = ");
  expect_error(mul_mat_id_cpu(a_), StatusCode::kInvalidArgument, "is not 4-byte aligned (F32 elements)");
}

TEST_F(ReliabilityMulMatId, MisalignedIdsAreRefused) {
  a_.ids = off_by_one(ids_.data());
  expect_refused(a_, "is not 4-byte aligned (int32 elements)");
  expect_error(validate_ids(a_.ids, kT, kTopK, kE), StatusCode::kInvalidArgument, "ids = ");
  RoutingPlan plan;
  expect_error(build_routing_plan(a_.ids, kT, kTopK, kE, PlanOptions{}, &plan), StatusCode::kInvalidArgument,
               "4-byte aligned");
}

TEST_F(ReliabilityMulMatId, MisalignedAlphaIsRefused) {
  std::vector<float> alpha(kE + 1, 1.0f);
  a_.weights.alpha = off_by_one(alpha.data());
  expect_refused(a_, "weights.alpha = ");
  expect_error(validate_weights(a_.weights, "w"), StatusCode::kInvalidArgument, "w.alpha = ");
}

TEST_F(ReliabilityMulMatId, ZeroTokensNeedNoBuffers) {
  a_.num_tokens = 0;
  a_.x = a_.y = nullptr;
  a_.ids = nullptr;
  EXPECT_TRUE(validate_mul_mat_id(a_).ok());
  EXPECT_TRUE(mul_mat_id_cpu(a_).ok());
  EXPECT_TRUE(mul_mat_id_reference(a_, nullptr).ok());
}

TEST_F(ReliabilityMulMatId, DuplicateExpertOfOneTokenIsAnErrorInEveryEntryPoint) {
  ids_[2] = ids_[3] = 1;  // token 1, both slots
  expect_refused(a_, "ids[1][0] and ids[1][1] are both expert 1");
  RoutingPlan plan;
  expect_error(build_routing_plan(ids_.data(), kT, kTopK, kE, PlanOptions{}, &plan), StatusCode::kInvalidArgument,
               "both expert 1");
}

// NaN / Inf in x are not errors: IEEE propagation into that token's outputs,
// nothing else changes, no hang or crash.
TEST_F(ReliabilityMulMatId, NonFiniteInputsPropagateToTheirTokenOnly) {
  ASSERT_TRUE(mul_mat_id_cpu(a_).ok());
  const std::vector<float> clean(y_.begin(), y_.end() - 1);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::max()};
  for (const float v : specials) {
    SCOPED_TRACE(v);
    std::vector<float> x = x_;
    x[1 * kK + 5] = v;  // token 1
    a_.x = x.data();
    testing::poison(y_);
    ASSERT_TRUE(mul_mat_id_cpu(a_).ok());
    std::vector<double> ref(kT * kTopK * kN);
    ASSERT_TRUE(mul_mat_id_reference(a_, ref.data()).ok());
    for (int64_t t = 0; t < kT; ++t) {
      for (int64_t i = 0; i < kTopK * kN; ++i) {
        const int64_t at = t * kTopK * kN + i;
        if (t == 1) {
          // FLT_MAX rounds to BF16 +inf (round to nearest even), like the rest.
          EXPECT_FALSE(std::isfinite(y_[at])) << at;
          EXPECT_FALSE(std::isfinite(ref[at])) << at;
        } else {
          EXPECT_EQ(std::memcmp(&y_[at], &clean[at], sizeof(float)), 0) << at;
        }
      }
    }
  }
}

TEST_F(ReliabilityMulMatId, NonFiniteBf16InputsPropagate) {
  std::vector<uint16_t> xb = testing::to_bf16(x_);
  xb[2 * kK] = 0x7FC0;  // NaN, token 2
  xb[0] = 0xFF80;       // -inf, token 0
  a_.x = xb.data();
  a_.x_dtype = DType::kBF16;
  ASSERT_TRUE(mul_mat_id_cpu(a_).ok());
  for (int64_t i = 0; i < kTopK * kN; ++i) {
    EXPECT_FALSE(std::isfinite(y_[i]));
    EXPECT_TRUE(std::isfinite(y_[kTopK * kN + i]));
    EXPECT_TRUE(std::isnan(y_[2 * kTopK * kN + i]));
  }
}

class ReliabilityMoeLayer : public ::testing::Test {
 protected:
  static constexpr int64_t kH = 64, kF = 128;

  void SetUp() override {
    std::mt19937_64 rng(test_seed());
    gate_ = testing::quantized_weights(rng, kE, kF, kH);
    up_ = testing::quantized_weights(rng, kE, kF, kH);
    down_ = testing::quantized_weights(rng, kE, kH, kF);
    x_ = testing::random_normal(rng, kT * kH + 1, 1.0f);
    ids_ = {0, 2, 1, 0, 3, 2, 0};
    route_ = {0.5f, 0.5f, 0.25f, 0.75f, 1.0f, 2.0f, 0.0f};
    out_.assign(kT * kH + 1, 0.0f);
    a_.weights.gate = gate_.view();
    a_.weights.up = up_.view();
    a_.weights.down = down_.view();
    a_.x = x_.data();
    a_.ids = ids_.data();
    a_.route_weights = route_.data();
    a_.num_tokens = kT;
    a_.top_k = kTopK;
    a_.out = out_.data();
  }

  void expect_refused(const MoeLayerArgs& a, const std::string& fragment) {
    expect_error(validate_moe_layer(a), StatusCode::kInvalidArgument, fragment);
    expect_error(moe_layer_cpu(a), StatusCode::kInvalidArgument, fragment);
    std::vector<double> ref(out_.size());
    expect_error(moe_layer_reference(a, ref.data()), StatusCode::kInvalidArgument, fragment);
  }

  ExpertWeights gate_, up_, down_;
  std::vector<float> x_, out_, route_;
  std::vector<int32_t> ids_;
  MoeLayerArgs a_;
};

TEST_F(ReliabilityMoeLayer, MisalignedPointersAreRefused) {
  a_.x = off_by_one(x_.data());
  expect_refused(a_, "x = ");
  a_.x = x_.data();
  a_.route_weights = off_by_one(route_.data());
  expect_refused(a_, "route_weights = ");
  a_.route_weights = route_.data();
  a_.out = off_by_one(out_.data());
  expect_error(moe_layer_cpu(a_), StatusCode::kInvalidArgument, "out = ");
  a_.out = out_.data();
  std::vector<float> alpha(kE + 1, 1.0f);
  a_.weights.down.alpha = off_by_one(alpha.data());
  expect_refused(a_, "down.alpha = ");
}

TEST_F(ReliabilityMoeLayer, NonFiniteInputsAndRouterWeightsPropagateToTheirTokenOnly) {
  ASSERT_TRUE(moe_layer_cpu(a_).ok());
  const std::vector<float> clean(out_.begin(), out_.end() - 1);
  for (const Activation kind : {Activation::kSwiGLU, Activation::kSwiGLUOai}) {
    SCOPED_TRACE(activation_name(kind));
    a_.act.kind = kind;
    ASSERT_TRUE(moe_layer_cpu(a_).ok());
    const std::vector<float> base(out_.begin(), out_.end() - 1);
    std::vector<float> x = x_;
    x[2 * kH + 9] = std::numeric_limits<float>::quiet_NaN();  // token 2
    a_.x = x.data();
    std::vector<float> route = route_;
    route[0] = std::numeric_limits<float>::infinity();  // token 0, slot 0
    a_.route_weights = route.data();
    testing::poison(out_);
    ASSERT_TRUE(moe_layer_cpu(a_).ok());
    for (int64_t h = 0; h < kH; ++h) {
      EXPECT_FALSE(std::isfinite(out_[h])) << h;  // inf * finite (or * 0 = NaN)
      EXPECT_EQ(std::memcmp(&out_[kH + h], &base[kH + h], sizeof(float)), 0) << h;
      EXPECT_TRUE(std::isnan(out_[2 * kH + h])) << h;
    }
    a_.x = x_.data();
    a_.route_weights = route_.data();
  }
  EXPECT_FALSE(testing::bitwise_equal(clean, std::vector<float>(kT * kH, 0.0f)));
}

TEST(ReliabilityFormat, MisalignedQuantizerAndDequantizerBuffersAreRefused) {
  std::vector<float> w(2 * 64 + 1, 0.5f);
  ExpertWeights q;
  q.num_experts = 42;
  expect_error(quantize_experts(off_by_one(w.data()), 1, 2, 64, {}, &q), StatusCode::kInvalidArgument,
               "is not 4-byte aligned (F32 elements)");
  std::vector<uint16_t> wb(2 * 64 + 1, float_to_bf16(0.5f));
  expect_error(quantize_experts_bf16(off_by_one(wb.data()), 1, 2, 64, {}, &q), StatusCode::kInvalidArgument,
               "is not 2-byte aligned (BF16 elements)");
  EXPECT_EQ(q.num_experts, 42) << "out untouched on error";
  ASSERT_TRUE(quantize_experts(w.data(), 1, 2, 64, {}, &q).ok());
  std::vector<float> out(2 * 64 + 1);
  expect_error(dequantize_experts(q.view(), true, off_by_one(out.data())), StatusCode::kInvalidArgument, "out = ");
  ExpertWeightsView v = q.view();
  std::vector<float> alpha(2, 1.0f);
  v.alpha = off_by_one(alpha.data());
  expect_error(dequantize_experts(v, true, out.data()), StatusCode::kInvalidArgument, "w.alpha = ");
}

}  // namespace
}  // namespace nvfp4moe
