// The CPU ops against the float64 references, and their determinism.
//
// NMSE thresholds. The engine's only approximation is FP32 accumulation:
// activations are BF16-rounded in both engine and reference, weights are
// exact, every product is exact, so the error is the rounding of the running
// sums (8 lanes of K/8 terms, relative step error <= 2^-24 ~ 6e-8). For random
// inputs that behaves like a random walk: relative error ~ 6e-8 * sqrt(K/8),
// i.e. NMSE ~ 4e-15 * K/8, about 1e-12 for K = 2048 and 1e-11 for K = 16k
// (this bound is pessimistic: these tests observe 1e-16 .. 1e-14).
// kMatmulNmse = 1e-9 leaves two orders of magnitude of margin, while any real
// defect (one wrong element among ~1e4, a lost block scale, a wrong alpha or
// slot) gives NMSE >= 1e-5.
//
// The layer rounds h to BF16 (engine and reference alike), but the engine's h
// before rounding differs from the reference's by ~1e-7 relative, so now and
// then an element sits on a BF16 rounding boundary and rounds the other way:
// one BF16 step (2^-8 relative) on one of F inputs of the down projection, an
// NMSE contribution of ~2^-16 / F ~ 1e-7 for F = 128 on that token. The
// layer threshold kLayerNmse = 1e-5 covers a few such flips per token; real
// defects (a wrong activation, a dropped slot, a wrong router weight) give
// NMSE >= 1e-3.
#include <gtest/gtest.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu/kernels.hpp"
#include "cpu/ops_internal.hpp"
#include "cpu_test_util.hpp"
#include "nvfp4moe/ops.hpp"

namespace nvfp4moe {
namespace {

using testing::all_finite;
using testing::bitwise_equal;
using testing::count_nonzero;
using testing::first_non_bf16;
using testing::quantized_weights;
using testing::random_ids;
using testing::random_normal;
using testing::test_seed;

constexpr double kMatmulNmse = 1e-9;
constexpr double kLayerNmse = 1e-5;

// ---- MUL_MAT_ID ---------------------------------------------------------------

struct MatmulCase {
  int64_t E = 8, N = 70, K = 640, T = 7, k = 2;
  bool per_slot = false;
  DType dtype = DType::kF32;
};

struct MatmulData {
  ExpertWeights w;
  std::vector<float> x;
  std::vector<uint16_t> x_bf16;
  std::vector<int32_t> ids;
  std::vector<float> y;

  MulMatIdArgs args(const MatmulCase& c) {
    MulMatIdArgs a;
    a.weights = w.view();
    a.x = c.dtype == DType::kBF16 ? static_cast<const void*>(x_bf16.data()) : x.data();
    a.x_dtype = c.dtype;
    a.x_per_slot = c.per_slot;
    a.ids = ids.data();
    a.num_tokens = c.T;
    a.top_k = c.k;
    a.y = y.data();
    return a;
  }
};

MatmulData make_matmul(std::mt19937_64& rng, const MatmulCase& c) {
  MatmulData d;
  d.w = quantized_weights(rng, c.E, c.N, c.K);
  d.x = random_normal(rng, static_cast<size_t>(c.T * (c.per_slot ? c.k : 1) * c.K), 1.0f);
  d.x_bf16 = testing::to_bf16(d.x);
  d.ids = random_ids(rng, c.T, c.k, c.E);
  d.y.resize(static_cast<size_t>(c.T * c.k * c.N));
  testing::poison(d.y);
  return d;
}

std::string describe(const MatmulCase& c) {
  return "E=" + std::to_string(c.E) + " N=" + std::to_string(c.N) + " K=" + std::to_string(c.K) +
         " T=" + std::to_string(c.T) + " k=" + std::to_string(c.k) + (c.per_slot ? " x[T][k][K]" : " x[T][K]") +
         " " + dtype_name(c.dtype);
}

void expect_matches_reference(const MatmulCase& c, MatmulData& d, const CpuOptions& opt = {}) {
  SCOPED_TRACE(describe(c));
  MulMatIdArgs a = d.args(c);
  testing::poison(d.y);
  const Status s = mul_mat_id_cpu(a, opt);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(all_finite(d.y)) << "output not fully written";
  std::vector<double> ref(d.y.size());
  ASSERT_TRUE(mul_mat_id_reference(a, ref.data()).ok());
  EXPECT_LT(nmse(d.y.data(), ref.data(), static_cast<int64_t>(ref.size())), kMatmulNmse);
}

TEST(CpuMulMatId, MatchesReferenceForBothLayoutsAndDtypes) {
  std::mt19937_64 rng(test_seed());
  for (bool per_slot : {false, true}) {
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      MatmulCase c;
      c.per_slot = per_slot;
      c.dtype = dtype;
      c.T = 64;
      c.k = 3;
      MatmulData d = make_matmul(rng, c);
      expect_matches_reference(c, d);
    }
  }
}

TEST(CpuMulMatId, RaggedRoutingAcrossTokenCounts) {
  std::mt19937_64 rng(test_seed());
  for (int64_t T : {1, 7, 64, 300}) {
    MatmulCase c;
    c.T = T;
    c.k = 4;
    c.E = 16;
    c.N = 40;
    c.K = 192;
    MatmulData d = make_matmul(rng, c);
    // Skewed: half the experts get nothing, expert 3 gets most pairs.
    d.ids = testing::ids_from(rng, T, c.k, {3, 5, 6, 9, 12});
    expect_matches_reference(c, d);
  }
}

TEST(CpuMulMatId, OneExpertGetsEveryToken) {
  std::mt19937_64 rng(test_seed());
  MatmulCase c;
  c.T = 300;  // 300 rows on one expert: three jobs, the last one partial
  c.k = 1;
  c.N = 50;
  c.K = 128;
  MatmulData d = make_matmul(rng, c);
  std::fill(d.ids.begin(), d.ids.end(), 6);
  expect_matches_reference(c, d);
}

TEST(CpuMulMatId, TopOneAndWideK) {
  std::mt19937_64 rng(test_seed());
  MatmulCase c;
  c.k = 1;
  c.T = 9;
  c.K = 2048 + 64;  // several K panels plus a short one
  c.N = 20;
  MatmulData d = make_matmul(rng, c);
  expect_matches_reference(c, d);
}

TEST(CpuMulMatId, AlphaScalesTheAccumulatorExactly) {
  std::mt19937_64 rng(test_seed());
  MatmulCase c;
  c.T = 20;
  MatmulData d = make_matmul(rng, c);
  ASSERT_TRUE(mul_mat_id_cpu(d.args(c)).ok());
  const std::vector<float> base = d.y;
  // Multiplying alpha by 4 multiplies the F32 result by exactly 4.
  for (auto& a : d.w.alpha) a *= 4.0f;
  testing::poison(d.y);
  ASSERT_TRUE(mul_mat_id_cpu(d.args(c)).ok());
  for (size_t i = 0; i < base.size(); ++i) ASSERT_EQ(d.y[i], 4.0f * base[i]) << i;
  // alpha = nullptr means 1 for every expert.
  std::vector<float> alpha = d.w.alpha;
  MulMatIdArgs a = d.args(c);
  a.weights.alpha = nullptr;
  ASSERT_TRUE(mul_mat_id_cpu(a).ok());
  std::vector<double> ref(d.y.size());
  ASSERT_TRUE(mul_mat_id_reference(a, ref.data()).ok());
  EXPECT_LT(nmse(d.y.data(), ref.data(), static_cast<int64_t>(ref.size())), kMatmulNmse);
  for (int64_t p = 0; p < c.T * c.k; ++p) {
    const float scale = alpha[d.ids[p]] / 4.0f;
    for (int64_t n = 0; n < c.N; ++n) {
      ASSERT_EQ(base[p * c.N + n], d.y[p * c.N + n] * scale) << "pair " << p << " n " << n;
    }
  }
}

TEST(CpuMulMatId, DeterministicAcrossRunsThreadsSchedulesAndKernels) {
  std::mt19937_64 rng(test_seed());
  MatmulCase c;
  c.T = 150;
  c.k = 4;
  c.E = 6;
  c.N = 97;
  MatmulData d = make_matmul(rng, c);
  ASSERT_TRUE(mul_mat_id_cpu(d.args(c), CpuOptions{1, Schedule::kCompact}).ok());
  const std::vector<float> first = d.y;
  auto run = [&](const CpuOptions& opt, const cpu::Kernels& k) {
    testing::poison(d.y);
    const Status s = cpu::mul_mat_id_with(d.args(c), opt, k);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return d.y;
  };
  for (int threads : {1, 2, 3, 5, 0}) {
    for (Schedule sched : {Schedule::kCompact, Schedule::kRect}) {
      SCOPED_TRACE("threads " + std::to_string(threads) + " " + schedule_name(sched));
      EXPECT_TRUE(bitwise_equal(run(CpuOptions{threads, sched}, cpu::best_kernels()), first));
    }
  }
  EXPECT_TRUE(bitwise_equal(run(CpuOptions{2, Schedule::kCompact}, cpu::scalar_kernels()), first)) << "scalar";
  if (const cpu::Kernels* k = cpu::avx2_kernels()) {
    EXPECT_TRUE(bitwise_equal(run(CpuOptions{2, Schedule::kRect}, *k), first)) << "avx2";
  }
}

TEST(CpuMulMatId, TokenResultDoesNotDependOnTheBatch) {
  // A token computed alone takes the direct path (1 row per expert), inside
  // a batch of 200 the tiled one: the canonical chain makes them identical.
  std::mt19937_64 rng(test_seed());
  MatmulCase c;
  c.T = 200;
  c.k = 2;
  c.E = 4;
  MatmulData d = make_matmul(rng, c);
  ASSERT_TRUE(mul_mat_id_cpu(d.args(c)).ok());
  for (int64_t t : {0, 57, 199}) {
    MulMatIdArgs a = d.args(c);
    a.x = d.x.data() + t * c.K;
    a.ids = d.ids.data() + t * c.k;
    a.num_tokens = 1;
    std::vector<float> y(c.k * c.N, std::numeric_limits<float>::quiet_NaN());
    a.y = y.data();
    ASSERT_TRUE(mul_mat_id_cpu(a).ok());
    for (int64_t i = 0; i < c.k * c.N; ++i) ASSERT_EQ(y[i], d.y[t * c.k * c.N + i]) << "token " << t << " i " << i;
  }
}

TEST(CpuMulMatId, SubnormalScalesAndCallerFtzDazMode) {
  // UE4M3 bytes 0x01..0x07 are subnormal scales (m * 2^-9). The vector scale
  // decoder goes through F32 denormals, so it must not see the caller's
  // flush-to-zero / denormals-are-zero mode; neither may the accumulation.
  std::mt19937_64 rng(test_seed());
  MatmulCase c;
  c.T = 30;
  MatmulData d = make_matmul(rng, c);
  for (size_t i = 0; i < d.w.scales.size(); i += 3) d.w.scales[i] = static_cast<uint8_t>(1 + i % 7);
  expect_matches_reference(c, d);
  const std::vector<float> ieee = d.y;
#if defined(__x86_64__) || defined(__i386__)
  const unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ | DAZ, as -ffast-math start-up code sets
  testing::poison(d.y);
  // One thread: the caller's own thread (whose mode is set here) does the work.
  const Status s = mul_mat_id_cpu(d.args(c), CpuOptions{1});
  const unsigned during = _mm_getcsr();
  _mm_setcsr(saved);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(during, saved | 0x8040u) << "the caller's mode must be restored";
  EXPECT_TRUE(bitwise_equal(d.y, ieee));
#endif
}

TEST(CpuMulMatId, ZeroTokensIsANoOp) {
  std::mt19937_64 rng(test_seed());
  MatmulCase c;
  MatmulData d = make_matmul(rng, c);
  MulMatIdArgs a = d.args(c);
  a.num_tokens = 0;
  a.x = nullptr;
  a.y = nullptr;
  a.ids = nullptr;
  EXPECT_TRUE(mul_mat_id_cpu(a).ok());
  std::vector<double> ref;
  EXPECT_TRUE(mul_mat_id_reference(a, ref.data()).ok());
}

// ---- MoE layer ------------------------------------------------------------------

struct LayerCase {
  int64_t E = 6, H = 128, F = 192, T = 23, k = 3;
  bool merged = false;
  bool route_weights = true;
  ActivationParams act;
  DType dtype = DType::kF32;
};

struct LayerData {
  ExpertWeights gate, up, gate_up, down;
  std::vector<float> x, route;
  std::vector<uint16_t> x_bf16;
  std::vector<int32_t> ids;
  std::vector<float> out;

  MoeLayerArgs args(const LayerCase& c) {
    MoeLayerArgs a;
    if (c.merged) {
      a.weights.gate_up = gate_up.view();
    } else {
      a.weights.gate = gate.view();
      a.weights.up = up.view();
    }
    a.weights.down = down.view();
    a.act = c.act;
    a.x = c.dtype == DType::kBF16 ? static_cast<const void*>(x_bf16.data()) : x.data();
    a.x_dtype = c.dtype;
    a.ids = ids.data();
    a.route_weights = c.route_weights ? route.data() : nullptr;
    a.num_tokens = c.T;
    a.top_k = c.k;
    a.out = out.data();
    return a;
  }
};

// gate_up [E][2F][H] = gate rows then up rows; its alpha is gate's (so use
// gate alpha == up alpha when comparing merged with separate).
ExpertWeights merge_gate_up(const ExpertWeights& gate, const ExpertWeights& up) {
  ExpertWeights m;
  m.num_experts = gate.num_experts;
  m.rows = 2 * gate.rows;
  m.cols = gate.cols;
  m.alpha = gate.alpha;
  const size_t code_bytes = gate.codes.size() / gate.num_experts, scale_bytes = gate.scales.size() / gate.num_experts;
  for (int64_t e = 0; e < gate.num_experts; ++e) {
    m.codes.insert(m.codes.end(), gate.codes.begin() + e * code_bytes, gate.codes.begin() + (e + 1) * code_bytes);
    m.codes.insert(m.codes.end(), up.codes.begin() + e * code_bytes, up.codes.begin() + (e + 1) * code_bytes);
    m.scales.insert(m.scales.end(), gate.scales.begin() + e * scale_bytes, gate.scales.begin() + (e + 1) * scale_bytes);
    m.scales.insert(m.scales.end(), up.scales.begin() + e * scale_bytes, up.scales.begin() + (e + 1) * scale_bytes);
  }
  return m;
}

LayerData make_layer(std::mt19937_64& rng, const LayerCase& c) {
  LayerData d;
  d.gate = quantized_weights(rng, c.E, c.F, c.H);
  d.up = quantized_weights(rng, c.E, c.F, c.H);
  d.up.alpha = d.gate.alpha;  // lets the merged form hold the same layer
  d.gate_up = merge_gate_up(d.gate, d.up);
  d.down = quantized_weights(rng, c.E, c.H, c.F);
  d.x = random_normal(rng, static_cast<size_t>(c.T * c.H), 1.0f);
  d.x_bf16 = testing::to_bf16(d.x);
  d.ids = random_ids(rng, c.T, c.k, c.E);
  std::uniform_real_distribution<float> w(0.05f, 1.0f);
  d.route.resize(static_cast<size_t>(c.T * c.k));
  for (auto& r : d.route) r = w(rng);
  d.out.resize(static_cast<size_t>(c.T * c.H));
  return d;
}

std::string describe(const LayerCase& c) {
  return "E=" + std::to_string(c.E) + " H=" + std::to_string(c.H) + " F=" + std::to_string(c.F) +
         " T=" + std::to_string(c.T) + " k=" + std::to_string(c.k) + (c.merged ? " merged" : " separate") + " " +
         activation_name(c.act.kind) + (c.route_weights ? " routed" : " unweighted") + " " + dtype_name(c.dtype);
}

double layer_nmse(const LayerCase& c, LayerData& d, const CpuOptions& opt = {}) {
  MoeLayerArgs a = d.args(c);
  testing::poison(d.out);
  const Status s = moe_layer_cpu(a, opt);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(all_finite(d.out)) << "output not fully written";
  std::vector<double> ref(d.out.size());
  EXPECT_TRUE(moe_layer_reference(a, ref.data()).ok());
  return nmse(d.out.data(), ref.data(), static_cast<int64_t>(ref.size()));
}

TEST(CpuMoeLayer, MatchesReferenceForEveryVariant) {
  std::mt19937_64 rng(test_seed());
  for (bool merged : {false, true}) {
    for (Activation act : {Activation::kSwiGLU, Activation::kSwiGLUOai}) {
      for (bool routed : {true, false}) {
        LayerCase c;
        c.merged = merged;
        c.act.kind = act;
        c.act.limit = 1.5f;  // small enough that the clamps engage on these inputs
        c.route_weights = routed;
        c.dtype = routed ? DType::kF32 : DType::kBF16;
        LayerData d = make_layer(rng, c);
        SCOPED_TRACE(describe(c));
        EXPECT_LT(layer_nmse(c, d), kLayerNmse);
      }
    }
  }
}

TEST(CpuMoeLayer, RaggedRoutingTopOneAndDecode) {
  std::mt19937_64 rng(test_seed());
  for (int64_t T : {1, 7, 64, 300}) {
    for (int64_t k : {1, 2}) {
      LayerCase c;
      c.T = T;
      c.k = k;
      c.E = 8;
      c.H = 64;
      c.F = 128;
      LayerData d = make_layer(rng, c);
      d.ids = testing::ids_from(rng, T, k, {1, 2, 7});  // experts 0, 3-6 empty
      SCOPED_TRACE(describe(c));
      EXPECT_LT(layer_nmse(c, d), kLayerNmse);
    }
  }
}

TEST(CpuMoeLayer, MergedEqualsSeparateBitwise) {
  std::mt19937_64 rng(test_seed());
  LayerCase c;
  c.T = 40;
  LayerData d = make_layer(rng, c);
  ASSERT_TRUE(moe_layer_cpu(d.args(c)).ok());
  const std::vector<float> separate = d.out;
  c.merged = true;
  testing::poison(d.out);
  ASSERT_TRUE(moe_layer_cpu(d.args(c)).ok());
  EXPECT_TRUE(bitwise_equal(d.out, separate));
}

TEST(CpuMoeLayer, GateAndUpAlphaAreSeparate) {
  // Doubling up's alpha only: SwiGLU is linear in u, so out doubles (up to the
  // BF16 rounding of h, which doubling commutes with: exactly).
  std::mt19937_64 rng(test_seed());
  LayerCase c;
  c.route_weights = false;
  LayerData d = make_layer(rng, c);
  ASSERT_TRUE(moe_layer_cpu(d.args(c)).ok());
  const std::vector<float> base = d.out;
  for (auto& a : d.up.alpha) a *= 2.0f;
  ASSERT_TRUE(moe_layer_cpu(d.args(c)).ok());
  for (size_t i = 0; i < base.size(); ++i) ASSERT_EQ(d.out[i], 2.0f * base[i]) << i;
  // Doubling gate's alpha instead is not a linear change.
  for (auto& a : d.up.alpha) a /= 2.0f;
  for (auto& a : d.gate.alpha) a *= 2.0f;
  ASSERT_TRUE(moe_layer_cpu(d.args(c)).ok());
  EXPECT_LT(layer_nmse(c, d), kLayerNmse);
  EXPECT_FALSE(bitwise_equal(d.out, base));
}

TEST(CpuMoeLayer, RouterWeightsScaleEachSlot) {
  std::mt19937_64 rng(test_seed());
  LayerCase c;
  c.k = 2;
  LayerData d = make_layer(rng, c);
  // Slot 1 weighted 0: the output is slot 0's alone, which k = 1 computes.
  for (int64_t t = 0; t < c.T; ++t) d.route[t * 2 + 1] = 0.0f;
  ASSERT_TRUE(moe_layer_cpu(d.args(c)).ok());
  const std::vector<float> two_slots = d.out;
  LayerData single = d;
  LayerCase c1 = c;
  c1.k = 1;
  for (int64_t t = 0; t < c.T; ++t) {
    single.ids[t] = d.ids[t * 2];
    single.route[t] = d.route[t * 2];
  }
  ASSERT_TRUE(moe_layer_cpu(single.args(c1)).ok());
  EXPECT_TRUE(bitwise_equal(single.out, two_slots));
}

// Each slot's down row is rounded to BF16 before its router weight and the
// combine (design.md, Numerics): with one slot and no router weights the
// output is that row, so every value is a BF16 value.
TEST(CpuMoeLayer, SlotRowsAreRoundedToBf16) {
  std::mt19937_64 rng(test_seed());
  LayerCase c;
  c.k = 1;
  c.route_weights = false;
  LayerData d = make_layer(rng, c);
  ASSERT_TRUE(moe_layer_cpu(d.args(c)).ok());
  const int64_t bad = first_non_bf16(d.out);
  ASSERT_EQ(bad, -1) << "out[" << bad << "] = " << d.out[bad] << " is not a BF16 value";
  EXPECT_GT(count_nonzero(d.out), int64_t(d.out.size()) / 2);
}

TEST(CpuMoeLayer, DeterministicAcrossRunsThreadsSchedulesAndKernels) {
  std::mt19937_64 rng(test_seed());
  LayerCase c;
  c.T = 90;
  c.k = 4;
  c.merged = true;
  c.act.kind = Activation::kSwiGLUOai;
  LayerData d = make_layer(rng, c);
  ASSERT_TRUE(moe_layer_cpu(d.args(c), CpuOptions{1, Schedule::kCompact}).ok());
  const std::vector<float> first = d.out;
  auto run = [&](const CpuOptions& opt, const cpu::Kernels& k) {
    testing::poison(d.out);
    const Status s = cpu::moe_layer_with(d.args(c), opt, k);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return d.out;
  };
  for (int threads : {1, 2, 3, 0}) {
    for (Schedule sched : {Schedule::kCompact, Schedule::kRect}) {
      SCOPED_TRACE("threads " + std::to_string(threads) + " " + schedule_name(sched));
      EXPECT_TRUE(bitwise_equal(run(CpuOptions{threads, sched}, cpu::best_kernels()), first));
    }
  }
  EXPECT_TRUE(bitwise_equal(run(CpuOptions{2, Schedule::kCompact}, cpu::scalar_kernels()), first)) << "scalar";
}

TEST(CpuMoeLayer, ZeroTokensIsANoOp) {
  std::mt19937_64 rng(test_seed());
  LayerCase c;
  LayerData d = make_layer(rng, c);
  MoeLayerArgs a = d.args(c);
  a.num_tokens = 0;
  a.x = nullptr;
  a.out = nullptr;
  EXPECT_TRUE(moe_layer_cpu(a).ok());
}

// ---- small pieces -------------------------------------------------------------------

TEST(CpuOps, ActivationFormulas) {
  ActivationParams swiglu;
  EXPECT_FLOAT_EQ(apply_activation(swiglu, 0.0f, 3.0f), 0.0f);
  EXPECT_NEAR(apply_activation(swiglu, 1.0f, 2.0f), 2.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(apply_activation_f64(swiglu, -2.0, 0.5), -2.0 / (1.0 + std::exp(2.0)) * 0.5, 1e-15);
  ActivationParams oai{Activation::kSwiGLUOai, 1.702f, 7.0f};
  // g = min(g, 7), u = clamp(u, -7, 7), (u + 1) * g * sigmoid(1.702 g).
  const double g = 7.0, u = -7.0, alpha = 1.702f;
  const double expect = (u + 1.0) * g / (1.0 + std::exp(-alpha * g));
  EXPECT_NEAR(apply_activation_f64(oai, 9.0, -20.0), expect, 1e-12);
  EXPECT_NEAR(apply_activation(oai, 9.0f, -20.0f), expect, 1e-4);
  EXPECT_NEAR(apply_activation_f64(oai, -3.0, 2.0), 3.0 * -3.0 / (1.0 + std::exp(alpha * 3.0)), 1e-12);
  EXPECT_TRUE(std::isnan(apply_activation(oai, std::nanf(""), 1.0f)));
  EXPECT_TRUE(std::isnan(apply_activation(swiglu, 1.0f, std::nanf(""))));
}

TEST(CpuOps, NmseAndNames) {
  const float y[3] = {1.0f, 2.0f, 3.0f};
  const double ref[3] = {1.0, 2.0, 3.5};
  EXPECT_DOUBLE_EQ(nmse(y, ref, 3), 0.25 / (1.0 + 4.0 + 12.25));
  const float y_nan[3] = {1.0f, std::nanf(""), 3.0f};
  EXPECT_EQ(nmse(y_nan, ref, 3), std::numeric_limits<double>::infinity());
  const double zeros[2] = {0.0, 0.0};
  const float fz[2] = {0.0f, 0.0f}, fnz[2] = {0.0f, 1.0f};
  EXPECT_EQ(nmse(fz, zeros, 2), 0.0);
  EXPECT_EQ(nmse(fnz, zeros, 2), std::numeric_limits<double>::infinity());
  EXPECT_STREQ(dtype_name(DType::kF32), "f32");
  EXPECT_STREQ(dtype_name(DType::kBF16), "bf16");
  EXPECT_STREQ(schedule_name(Schedule::kCompact), "compact");
  EXPECT_STREQ(schedule_name(Schedule::kRect), "rect");
  EXPECT_STREQ(activation_name(Activation::kSwiGLU), "swiglu");
  EXPECT_STREQ(activation_name(Activation::kSwiGLUOai), "swiglu_oai");
  EXPECT_STREQ(dtype_name(static_cast<DType>(9)), "unknown");
}

}  // namespace
}  // namespace nvfp4moe
