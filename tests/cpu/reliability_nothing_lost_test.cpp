// "Nothing lost" (docs/reliability.md): a failed CPU op leaves its output
// untouched or fully written, by status code, as ops.hpp says. The output is
// filled with a signalling-NaN pattern that arithmetic never produces (its
// NaN results are quiet), so "untouched" = every element still holds the
// pattern and "fully written" = none does.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu_test_util.hpp"
#include "nvfp4moe/format.hpp"
#include "nvfp4moe/ops.hpp"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NVFP4MOE_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define NVFP4MOE_TEST_ASAN 1
#endif

namespace nvfp4moe {
namespace {

using testing::test_seed;

constexpr uint32_t kPoisonBits = 0x7FA5A5A5u;  // signalling NaN

void fill_poison(std::vector<float>& v) {
  for (float& f : v) std::memcpy(&f, &kPoisonBits, sizeof f);
}

int64_t poisoned_count(const std::vector<float>& v) {
  int64_t n = 0;
  for (const float& f : v) n += std::memcmp(&f, &kPoisonBits, sizeof f) == 0;
  return n;
}

struct Case {
  std::string what;
  std::function<void()> spoil;  // makes the call fail
  StatusCode code;
};

class NothingLostMulMatId : public ::testing::Test {
 protected:
  static constexpr int64_t kE = 4, kN = 64, kK = 128, kT = 3, kTopK = 2;

  void SetUp() override {
    std::mt19937_64 rng(test_seed());
    w_ = testing::quantized_weights(rng, kE, kN, kK);
    x_ = testing::random_normal(rng, kT * kK + 1, 1.0f);
    ids_ = {0, 1, 2, 3, 1, 0};
    y_.assign(kT * kTopK * kN, 0.0f);
    reset();
  }

  void reset() {
    a_ = MulMatIdArgs{};
    a_.weights = w_.view();
    a_.x = x_.data();
    a_.ids = ids_.data();
    a_.num_tokens = kT;
    a_.top_k = kTopK;
    a_.y = y_.data();
  }

  ExpertWeights w_;
  std::vector<float> x_, y_;
  std::vector<int32_t> ids_;
  MulMatIdArgs a_;
};

TEST_F(NothingLostMulMatId, EveryErrorFoundBeforeWritingLeavesYUntouched) {
  std::vector<int32_t> bad_ids = ids_;
  std::vector<float> bad_alpha = w_.alpha;
  const std::vector<Case> cases = {
      {"K % 64", [&] { a_.weights.cols = 96; }, StatusCode::kInvalidArgument},
      {"null codes", [&] { a_.weights.codes = nullptr; }, StatusCode::kInvalidArgument},
      {"dtype", [&] { a_.x_dtype = static_cast<DType>(9); }, StatusCode::kInvalidArgument},
      {"k > E", [&] { a_.top_k = kE + 1; }, StatusCode::kInvalidArgument},
      {"T < 0", [&] { a_.num_tokens = -1; }, StatusCode::kInvalidArgument},
      {"T*k > int32", [&] { a_.num_tokens = int64_t{1} << 31; }, StatusCode::kOutOfRange},
      {"id out of range", [&] { bad_ids[5] = kE; a_.ids = bad_ids.data(); }, StatusCode::kInvalidArgument},
      {"duplicate id", [&] { bad_ids[5] = 1; bad_ids[4] = 1; a_.ids = bad_ids.data(); },
       StatusCode::kInvalidArgument},
      {"null x", [&] { a_.x = nullptr; }, StatusCode::kInvalidArgument},
      {"misaligned x", [&] { a_.x = reinterpret_cast<const char*>(x_.data()) + 2; }, StatusCode::kInvalidArgument},
      {"negative alpha", [&] { bad_alpha[2] = -1.0f; a_.weights.alpha = bad_alpha.data(); },
       StatusCode::kFormatError},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    reset();
    bad_ids = ids_;
    bad_alpha = w_.alpha;
    c.spoil();
    fill_poison(y_);
    const Status s = mul_mat_id_cpu(a_);
    EXPECT_EQ(s.code(), c.code) << s.to_string();
    EXPECT_EQ(poisoned_count(y_), static_cast<int64_t>(y_.size())) << "y was written";
    std::vector<double> ref(y_.size(), -7.0);
    EXPECT_EQ(mul_mat_id_reference(a_, ref.data()).code(), c.code);
    for (double v : ref) ASSERT_EQ(v, -7.0) << "the reference wrote its output";
  }
}

TEST_F(NothingLostMulMatId, CorruptScaleFoundWhileRunningLeavesYFullyWritten) {
  for (const uint8_t byte : {uint8_t{0x7F}, uint8_t{0xFF}, uint8_t{0xB0}}) {
    SCOPED_TRACE(static_cast<int>(byte));
    ExpertWeights w = w_;
    w.scales[(1 * kN + 9) * (kK / 16) + 4] = byte;  // expert 1, row 9, block 4
    a_.weights = w.view();
    fill_poison(y_);
    const Status s = mul_mat_id_cpu(a_);
    EXPECT_EQ(s.code(), StatusCode::kFormatError) << s.to_string();
    EXPECT_NE(s.message().find("weights.scales[1][9][4]"), std::string::npos) << s.message();
    EXPECT_EQ(poisoned_count(y_), 0) << "y must be fully written";
  }
}

TEST_F(NothingLostMulMatId, HostOutOfMemoryIsAStatusAndLeavesYUntouched) {
#if defined(NVFP4MOE_TEST_ASAN)
  GTEST_SKIP() << "ASan's operator new reports out-of-memory and aborts instead of throwing std::bad_alloc";
#endif
  // K = 2^46: the op's BF16 copy of x needs 2^48 bytes, more than any x86-64
  // address space, so the allocation fails whatever the overcommit policy.
  // It is made before the weights or x are read, so small buffers stand in.
  a_.weights.cols = int64_t{1} << 46;
  a_.weights.alpha = nullptr;
  a_.num_tokens = 1;
  fill_poison(y_);
  const Status s = mul_mat_id_cpu(a_);
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory) << s.to_string();
  EXPECT_EQ(poisoned_count(y_), static_cast<int64_t>(y_.size()));
}

class NothingLostMoeLayer : public ::testing::Test {
 protected:
  static constexpr int64_t kE = 3, kH = 64, kF = 128, kT = 2;

  void SetUp() override {
    std::mt19937_64 rng(test_seed());
    gate_ = testing::quantized_weights(rng, kE, kF, kH);
    up_ = testing::quantized_weights(rng, kE, kF, kH);
    gate_up_ = testing::quantized_weights(rng, kE, 2 * kF, kH);
    down_ = testing::quantized_weights(rng, kE, kH, kF);
    x_ = testing::random_normal(rng, kT * kH, 1.0f);
    ids2_ = {0, 2, 1, 0};
    ids1_ = {2, 1};
    out_.assign(kT * kH, 0.0f);
    reset(2);
  }

  void reset(int64_t top_k) {
    a_ = MoeLayerArgs{};
    a_.weights.gate = gate_.view();
    a_.weights.up = up_.view();
    a_.weights.down = down_.view();
    a_.x = x_.data();
    a_.ids = top_k == 1 ? ids1_.data() : ids2_.data();
    a_.num_tokens = kT;
    a_.top_k = top_k;
    a_.out = out_.data();
  }

  ExpertWeights gate_, up_, gate_up_, down_;
  std::vector<float> x_, out_;
  std::vector<int32_t> ids1_, ids2_;
  MoeLayerArgs a_;
};

TEST_F(NothingLostMoeLayer, EveryErrorFoundBeforeWritingLeavesOutUntouched) {
  std::vector<float> bad_alpha = down_.alpha;
  const std::vector<int32_t> bad_ids = {0, -4, 1, 0};  // bad for k = 1 and k = 2
  const std::vector<Case> cases = {
      {"down rows", [&] { a_.weights.down.rows = 2 * kH; }, StatusCode::kInvalidArgument},
      {"gate/up mismatch", [&] { a_.weights.up.rows = 64; }, StatusCode::kInvalidArgument},
      {"activation", [&] { a_.act.kind = static_cast<Activation>(4); }, StatusCode::kInvalidArgument},
      {"k > E", [&] { a_.top_k = kE + 1; }, StatusCode::kInvalidArgument},
      {"id out of range", [&] { a_.ids = bad_ids.data(); }, StatusCode::kInvalidArgument},
      {"misaligned route weights",
       [&] { a_.route_weights = reinterpret_cast<const float*>(reinterpret_cast<const char*>(x_.data()) + 1); },
       StatusCode::kInvalidArgument},
      {"alpha inf",
       [&] {
         bad_alpha[1] = std::numeric_limits<float>::infinity();
         a_.weights.down.alpha = bad_alpha.data();
       },
       StatusCode::kFormatError},
  };
  for (const int64_t top_k : {1, 2}) {
    for (const Case& c : cases) {
      SCOPED_TRACE(c.what + ", k = " + std::to_string(top_k));
      reset(top_k);
      bad_alpha = down_.alpha;
      c.spoil();
      fill_poison(out_);
      const Status s = moe_layer_cpu(a_);
      EXPECT_EQ(s.code(), c.code) << s.to_string();
      EXPECT_EQ(poisoned_count(out_), static_cast<int64_t>(out_.size())) << "out was written";
    }
  }
}

TEST_F(NothingLostMoeLayer, CorruptScaleInAnyProjectionLeavesOutFullyWritten) {
  for (const int64_t top_k : {1, 2}) {
    for (const char* projection : {"gate", "up", "gate_up", "down"}) {
      SCOPED_TRACE(std::string(projection) + ", k = " + std::to_string(top_k));
      reset(top_k);
      ExpertWeights gate = gate_, up = up_, gate_up = gate_up_, down = down_;
      const std::string p = projection;
      // Expert 2 is routed in both routings.
      if (p == "gate") gate.scales[(2 * kF + 3) * (kH / 16)] = 0x7F;
      if (p == "up") up.scales[(2 * kF + 5) * (kH / 16) + 1] = 0xFF;
      if (p == "gate_up") gate_up.scales[(2 * 2 * kF + kF + 5) * (kH / 16) + 2] = 0x7F;
      if (p == "down") down.scales[(2 * kH + 7) * (kF / 16) + 3] = 0xC1;
      a_.weights.gate = gate.view();
      a_.weights.up = up.view();
      a_.weights.down = down.view();
      if (p == "gate_up") a_.weights.gate_up = gate_up.view();
      fill_poison(out_);
      const Status s = moe_layer_cpu(a_);
      EXPECT_EQ(s.code(), StatusCode::kFormatError) << s.to_string();
      EXPECT_NE(s.message().find(p + ".scales[2]"), std::string::npos) << s.message();
      EXPECT_EQ(poisoned_count(out_), 0) << "out must be fully written";
    }
  }
}

TEST_F(NothingLostMoeLayer, HostOutOfMemoryIsAStatusAndLeavesOutUntouched) {
#if defined(NVFP4MOE_TEST_ASAN)
  GTEST_SKIP() << "ASan's operator new reports out-of-memory and aborts instead of throwing std::bad_alloc";
#endif
  // H = 2^46: the BF16 copy of x needs 2^48 bytes (see the MUL_MAT_ID case);
  // it is allocated before the weights or x are read.
  const int64_t H = int64_t{1} << 46;
  a_.weights.gate.cols = a_.weights.up.cols = H;
  a_.weights.down.rows = H;
  a_.num_tokens = 1;
  fill_poison(out_);
  const Status s = moe_layer_cpu(a_);
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory) << s.to_string();
  EXPECT_EQ(poisoned_count(out_), static_cast<int64_t>(out_.size()));
}

}  // namespace
}  // namespace nvfp4moe
