// One test per argument error of the CPU ops: the status code and a message
// that names the argument and its value.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu_test_util.hpp"
#include "nvfp4moe/ops.hpp"

namespace nvfp4moe {
namespace {

using testing::test_seed;

void expect_error(const Status& s, StatusCode code, const std::string& fragment) {
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(fragment), std::string::npos) << "message: " << s.message();
}

class CpuMulMatIdValidation : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(test_seed());
    w_ = testing::quantized_weights(rng, 4, 32, 128);
    x_ = testing::random_normal(rng, 3 * 128, 1.0f);
    ids_ = {0, 1, 2, 3, 1, 0};
    y_.assign(3 * 2 * 32, 0.0f);
    a_.weights = w_.view();
    a_.x = x_.data();
    a_.ids = ids_.data();
    a_.num_tokens = 3;
    a_.top_k = 2;
    a_.y = y_.data();
  }

  // Every entry point must refuse the same arguments the same way.
  void expect_refused(const MulMatIdArgs& a, StatusCode code, const std::string& fragment) {
    expect_error(validate_mul_mat_id(a), code, fragment);
    expect_error(mul_mat_id_cpu(a), code, fragment);
    std::vector<double> ref(y_.size());
    expect_error(mul_mat_id_reference(a, ref.data()), code, fragment);
  }

  ExpertWeights w_;
  std::vector<float> x_, y_;
  std::vector<int32_t> ids_;
  MulMatIdArgs a_;
};

TEST_F(CpuMulMatIdValidation, ValidArgumentsPass) {
  EXPECT_TRUE(validate_mul_mat_id(a_).ok());
  EXPECT_TRUE(mul_mat_id_cpu(a_).ok());
}

TEST_F(CpuMulMatIdValidation, KNotMultipleOf64) {
  a_.weights.cols = 96;
  expect_refused(a_, StatusCode::kInvalidArgument, "weights.cols = 96 is not a multiple of 64");
}

TEST_F(CpuMulMatIdValidation, NonPositiveRows) {
  a_.weights.rows = 0;
  expect_refused(a_, StatusCode::kInvalidArgument, "weights.rows = 0");
}

TEST_F(CpuMulMatIdValidation, NonPositiveExperts) {
  a_.weights.num_experts = 0;
  expect_refused(a_, StatusCode::kInvalidArgument, "weights.num_experts = 0");
}

TEST_F(CpuMulMatIdValidation, NullCodes) {
  a_.weights.codes = nullptr;
  expect_refused(a_, StatusCode::kInvalidArgument, "weights.codes is null");
}

TEST_F(CpuMulMatIdValidation, NullScales) {
  a_.weights.scales = nullptr;
  expect_refused(a_, StatusCode::kInvalidArgument, "weights.scales is null");
}

TEST_F(CpuMulMatIdValidation, BadDtype) {
  a_.x_dtype = static_cast<DType>(7);
  expect_refused(a_, StatusCode::kInvalidArgument, "x_dtype = 7");
}

TEST_F(CpuMulMatIdValidation, NegativeTokenCount) {
  a_.num_tokens = -2;
  expect_refused(a_, StatusCode::kInvalidArgument, "num_tokens = -2");
}

TEST_F(CpuMulMatIdValidation, TopKOutOfRange) {
  a_.top_k = 0;
  expect_refused(a_, StatusCode::kInvalidArgument, "top_k = 0");
  a_.top_k = 5;
  expect_refused(a_, StatusCode::kInvalidArgument, "top_k = 5 must be in [1, num_experts = 4]");
}

TEST_F(CpuMulMatIdValidation, NullIds) {
  a_.ids = nullptr;
  expect_refused(a_, StatusCode::kInvalidArgument, "ids is null");
}

TEST_F(CpuMulMatIdValidation, NullX) {
  a_.x = nullptr;
  expect_refused(a_, StatusCode::kInvalidArgument, "x is null");
}

TEST_F(CpuMulMatIdValidation, NullY) {
  a_.y = nullptr;
  expect_error(validate_mul_mat_id(a_), StatusCode::kInvalidArgument, "y is null");
  expect_error(mul_mat_id_cpu(a_), StatusCode::kInvalidArgument, "y is null");
  expect_error(mul_mat_id_reference(a_, nullptr), StatusCode::kInvalidArgument, "y is null");
}

TEST_F(CpuMulMatIdValidation, IdOutOfRange) {
  ids_[5] = 4;
  expect_refused(a_, StatusCode::kInvalidArgument, "ids[2][1] = 4 is out of range [0, 4)");
  ids_[5] = -1;
  expect_refused(a_, StatusCode::kInvalidArgument, "ids[2][1] = -1 is out of range [0, 4)");
}

TEST_F(CpuMulMatIdValidation, DuplicateExpertInOneToken) {
  ids_[3] = 2;
  expect_refused(a_, StatusCode::kInvalidArgument, "ids[1][0] and ids[1][1] are both expert 2");
}

TEST_F(CpuMulMatIdValidation, PairCountOverflowsInt32) {
  a_.num_tokens = int64_t{1} << 31;
  expect_refused(a_, StatusCode::kOutOfRange, "int32");
}

TEST_F(CpuMulMatIdValidation, NanScaleIsReportedWithItsPosition) {
  w_.scales[(2 * 32 + 5) * 8 + 3] = 0x7F;  // expert 2, row 5, block 3
  a_.weights = w_.view();
  EXPECT_TRUE(validate_mul_mat_id(a_).ok()) << "shapes, pointers and ids only";
  expect_error(mul_mat_id_cpu(a_), StatusCode::kFormatError, "weights.scales[2][5][3] = 0x7F");
  std::vector<double> ref(y_.size());
  expect_error(mul_mat_id_reference(a_, ref.data()), StatusCode::kFormatError, "weights.scales[2][5][3]");
}

TEST_F(CpuMulMatIdValidation, NegativeScaleIsReported) {
  w_.scales[(1 * 32 + 0) * 8 + 0] = 0x90;
  a_.weights = w_.view();
  expect_error(mul_mat_id_cpu(a_), StatusCode::kFormatError, "weights.scales[1][0][0] = 0x90");
}

TEST_F(CpuMulMatIdValidation, BadAlpha) {
  w_.alpha[3] = -1.0f;
  a_.weights = w_.view();
  expect_error(mul_mat_id_cpu(a_), StatusCode::kFormatError, "weights.alpha[3] = -1 is negative");
  w_.alpha[3] = std::numeric_limits<float>::infinity();
  expect_error(mul_mat_id_cpu(a_), StatusCode::kFormatError, "weights.alpha[3] = inf is not finite");
}

TEST_F(CpuMulMatIdValidation, BadSchedule) {
  expect_error(mul_mat_id_cpu(a_, CpuOptions{0, static_cast<Schedule>(3)}), StatusCode::kInvalidArgument,
               "schedule = 3");
}

class CpuMoeLayerValidation : public ::testing::Test {
 protected:
  static constexpr int64_t kE = 3, kH = 64, kF = 128, kT = 2, kK = 2;

  void SetUp() override {
    std::mt19937_64 rng(test_seed());
    gate_ = testing::quantized_weights(rng, kE, kF, kH);
    up_ = testing::quantized_weights(rng, kE, kF, kH);
    gate_up_ = testing::quantized_weights(rng, kE, 2 * kF, kH);
    down_ = testing::quantized_weights(rng, kE, kH, kF);
    x_ = testing::random_normal(rng, kT * kH, 1.0f);
    ids_ = {0, 2, 1, 0};
    out_.assign(kT * kH, 0.0f);
    a_.weights.gate = gate_.view();
    a_.weights.up = up_.view();
    a_.weights.down = down_.view();
    a_.x = x_.data();
    a_.ids = ids_.data();
    a_.num_tokens = kT;
    a_.top_k = kK;
    a_.out = out_.data();
  }

  void expect_refused(const MoeLayerArgs& a, StatusCode code, const std::string& fragment) {
    expect_error(validate_moe_layer(a), code, fragment);
    expect_error(moe_layer_cpu(a), code, fragment);
    std::vector<double> ref(out_.size());
    expect_error(moe_layer_reference(a, ref.data()), code, fragment);
  }

  ExpertWeights gate_, up_, gate_up_, down_;
  std::vector<float> x_, out_;
  std::vector<int32_t> ids_;
  MoeLayerArgs a_;
};

TEST_F(CpuMoeLayerValidation, ValidArgumentsPass) {
  EXPECT_TRUE(moe_layer_cpu(a_).ok());
  a_.weights.gate_up = gate_up_.view();
  EXPECT_TRUE(moe_layer_cpu(a_).ok());
}

TEST_F(CpuMoeLayerValidation, GateUpShapeMismatch) {
  a_.weights.up.rows = kF - 64;
  expect_refused(a_, StatusCode::kInvalidArgument, "up is [3][64][64] but gate is [3][128][64]");
}

TEST_F(CpuMoeLayerValidation, DownColsNotF) {
  std::mt19937_64 rng(1);
  ExpertWeights down = testing::quantized_weights(rng, kE, kH, 2 * kF);
  a_.weights.down = down.view();
  expect_refused(a_, StatusCode::kInvalidArgument, "down.cols = 256 must equal the FFN width F = 128");
}

TEST_F(CpuMoeLayerValidation, DownRowsNotH) {
  a_.weights.down.rows = 2 * kH;
  expect_refused(a_, StatusCode::kInvalidArgument, "down.rows = 128 must equal the hidden size H = 64");
}

TEST_F(CpuMoeLayerValidation, DownExpertCountMismatch) {
  a_.weights.down.num_experts = kE - 1;
  expect_refused(a_, StatusCode::kInvalidArgument, "down.num_experts = 2");
}

TEST_F(CpuMoeLayerValidation, MergedRowsOdd) {
  a_.weights.gate_up = gate_up_.view();
  a_.weights.gate_up.rows = 2 * kF - 1;
  expect_refused(a_, StatusCode::kInvalidArgument, "gate_up.rows = 255 is odd");
}

TEST_F(CpuMoeLayerValidation, FNotMultipleOf64) {
  // F = 96 passes gate/up (H = 64 is their K) but down's K = F must be % 64.
  a_.weights.gate.rows = a_.weights.up.rows = 96;
  a_.weights.down.cols = 96;
  expect_refused(a_, StatusCode::kInvalidArgument, "down.cols = 96 is not a multiple of 64");
}

TEST_F(CpuMoeLayerValidation, BadActivation) {
  a_.act.kind = static_cast<Activation>(5);
  expect_refused(a_, StatusCode::kInvalidArgument, "act.kind = 5");
  a_.act.kind = Activation::kSwiGLUOai;
  a_.act.limit = -1.0f;
  expect_refused(a_, StatusCode::kInvalidArgument, "act.limit = -1");
  a_.act.limit = 7.0f;
  a_.act.swiglu_alpha = std::numeric_limits<float>::quiet_NaN();
  expect_refused(a_, StatusCode::kInvalidArgument, "act.swiglu_alpha = nan");
}

TEST_F(CpuMoeLayerValidation, BadDtype) {
  a_.x_dtype = static_cast<DType>(-1);
  expect_refused(a_, StatusCode::kInvalidArgument, "x_dtype = -1");
}

TEST_F(CpuMoeLayerValidation, BadIds) {
  ids_[2] = 3;
  expect_refused(a_, StatusCode::kInvalidArgument, "ids[1][0] = 3 is out of range [0, 3)");
  ids_[2] = 0;
  expect_refused(a_, StatusCode::kInvalidArgument, "ids[1][0] and ids[1][1] are both expert 0");
}

TEST_F(CpuMoeLayerValidation, NullPointers) {
  a_.x = nullptr;
  expect_refused(a_, StatusCode::kInvalidArgument, "x is null");
  a_.x = x_.data();
  a_.out = nullptr;
  expect_error(moe_layer_cpu(a_), StatusCode::kInvalidArgument, "out is null");
  a_.out = out_.data();
  a_.weights.down.scales = nullptr;
  expect_refused(a_, StatusCode::kInvalidArgument, "down.scales is null");
}

TEST_F(CpuMoeLayerValidation, CorruptScaleInEachProjection) {
  up_.scales[(1 * kF + 7) * (kH / 16) + 2] = 0x7F;
  a_.weights.up = up_.view();
  expect_error(moe_layer_cpu(a_), StatusCode::kFormatError, "up.scales[1][7][2] = 0x7F");
  up_.scales[(1 * kF + 7) * (kH / 16) + 2] = 0x30;
  down_.scales[(2 * kH + 1) * (kF / 16) + 0] = 0xFF;
  a_.weights.up = up_.view();
  a_.weights.down = down_.view();
  expect_error(moe_layer_cpu(a_), StatusCode::kFormatError, "down.scales[2][1][0] = 0xFF");
}

TEST_F(CpuMoeLayerValidation, BadAlphaNamesTheProjection) {
  gate_.alpha[1] = std::numeric_limits<float>::quiet_NaN();
  a_.weights.gate = gate_.view();
  expect_error(moe_layer_cpu(a_), StatusCode::kFormatError, "gate.alpha[1] = nan is not finite");
}

}  // namespace
}  // namespace nvfp4moe
