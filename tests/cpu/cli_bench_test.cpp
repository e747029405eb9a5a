// The bench helpers of the CLI (tools/bench.cpp): routing generation,
// parsing, work counting and the random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

#include "bench.hpp"
#include "test_util.hpp"

namespace nvfp4moe::bench {
namespace {

// Every token has top_k distinct ids in [0, E).
void expect_valid_routing(const std::vector<int32_t>& ids, int64_t T, int64_t k, int64_t E) {
  ASSERT_EQ(ids.size(), static_cast<size_t>(T * k));
  for (int64_t t = 0; t < T; ++t) {
    std::set<int32_t> seen;
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = ids[t * k + j];
      ASSERT_GE(e, 0) << "ids[" << t << "][" << j << "]";
      ASSERT_LT(e, E) << "ids[" << t << "][" << j << "]";
      ASSERT_TRUE(seen.insert(e).second) << "token " << t << " has expert " << e << " twice";
    }
  }
}

std::vector<int64_t> counts_of(const std::vector<int32_t>& ids, int64_t E) {
  std::vector<int64_t> counts(E);
  for (int32_t e : ids) ++counts[e];
  return counts;
}

TEST(CliBench, PresetsHaveTheDocumentedShapes) {
  struct Want {
    const char* name;
    int64_t E, k, hidden, ffn;
  };
  const Want want[] = {{"qwen3-30b-a3b", 128, 8, 2048, 768},
                       {"gpt-oss-20b", 32, 4, 2880, 2880},
                       {"gpt-oss-120b", 128, 4, 2880, 2880},
                       {"deepseek-v3", 256, 8, 7168, 2048},
                       {"mixtral-8x7b", 8, 2, 4096, 14336}};
  ASSERT_EQ(presets().size(), std::size(want));
  for (const Want& w : want) {
    const Preset* p = find_preset(w.name);
    ASSERT_NE(p, nullptr) << w.name;
    EXPECT_EQ(p->num_experts, w.E) << w.name;
    EXPECT_EQ(p->top_k, w.k) << w.name;
    EXPECT_EQ(p->hidden, w.hidden) << w.name;
    EXPECT_EQ(p->ffn, w.ffn) << w.name;
  }
  EXPECT_EQ(find_preset("qwen3"), nullptr);
}

TEST(CliBench, UniformRoutingIsDistinctInRangeAndDeterministic) {
  const uint64_t seed = testing::test_seed();
  for (const Preset& p : presets()) {
    const int64_t T = 257;
    const auto ids = make_routing(Routing{}, T, p.top_k, p.num_experts, seed);
    expect_valid_routing(ids, T, p.top_k, p.num_experts);
    EXPECT_EQ(ids, make_routing(Routing{}, T, p.top_k, p.num_experts, seed)) << p.name;
    EXPECT_NE(ids, make_routing(Routing{}, T, p.top_k, p.num_experts, seed + 1)) << p.name;
  }
  // k = E: every token uses every expert once.
  expect_valid_routing(make_routing(Routing{}, 9, 8, 8, seed), 9, 8, 8);
}

TEST(CliBench, UniformRoutingSpreadsEvenly) {
  const uint64_t seed = testing::test_seed();
  const int64_t T = 4096, k = 8, E = 128;
  const auto counts = counts_of(make_routing(Routing{}, T, k, E, seed), E);
  // Each expert expects T * k / E = 256 hits (binomial, sd ~ 16): 6 sd bounds.
  for (int64_t e = 0; e < E; ++e) {
    EXPECT_GT(counts[e], 256 - 96) << "expert " << e;
    EXPECT_LT(counts[e], 256 + 96) << "expert " << e;
  }
}

TEST(CliBench, ZipfRoutingIsDistinctDeterministicAndSkewed) {
  const uint64_t seed = testing::test_seed();
  const int64_t T = 4096, k = 8, E = 128;
  Routing zipf;
  ASSERT_TRUE(parse_routing("zipf:1.2", &zipf).ok());
  const auto ids = make_routing(zipf, T, k, E, seed);
  expect_valid_routing(ids, T, k, E);
  EXPECT_EQ(ids, make_routing(zipf, T, k, E, seed));

  std::vector<int64_t> counts = counts_of(ids, E);
  std::sort(counts.rbegin(), counts.rend());
  // Weights 1/r^1.2 over 128 ranks, 8 distinct draws per token: the top expert
  // is in nearly every token, and the top 8 take well over a third of the
  // pairs, against 1/16 for uniform routing.
  EXPECT_GT(counts[0], T * 9 / 10);
  int64_t top8 = 0;
  for (int i = 0; i < 8; ++i) top8 += counts[i];
  EXPECT_GT(top8, T * k * 35 / 100);
  EXPECT_LT(counts[E - 1], counts[0] / 8);

  // A steeper exponent concentrates more.
  Routing steep;
  ASSERT_TRUE(parse_routing("zipf:2.5", &steep).ok());
  std::vector<int64_t> steep_counts = counts_of(make_routing(steep, T, k, E, seed), E);
  std::sort(steep_counts.rbegin(), steep_counts.rend());
  int64_t steep_top8 = 0;
  for (int i = 0; i < 8; ++i) steep_top8 += steep_counts[i];
  EXPECT_GT(steep_top8, top8);
}

TEST(CliBench, BalancedRoutingGivesEveryExpertItsShareToOnePair) {
  const uint64_t seed = testing::test_seed();
  Routing balanced;
  ASSERT_TRUE(parse_routing("balanced", &balanced).ok());
  EXPECT_EQ(balanced.name(), "balanced");
  for (const Preset& p : presets()) {
    for (const int64_t T : {int64_t(1), int64_t(7), int64_t(257), int64_t(2048)}) {
      const auto ids = make_routing(balanced, T, p.top_k, p.num_experts, seed);
      expect_valid_routing(ids, T, p.top_k, p.num_experts);
      const std::vector<int64_t> counts = counts_of(ids, p.num_experts);
      const int64_t lo = T * p.top_k / p.num_experts;
      const int64_t hi = (T * p.top_k + p.num_experts - 1) / p.num_experts;
      for (int64_t e = 0; e < p.num_experts; ++e) {
        EXPECT_GE(counts[e], lo) << p.name << " T=" << T << " expert " << e;
        EXPECT_LE(counts[e], hi) << p.name << " T=" << T << " expert " << e;
      }
      EXPECT_EQ(ids, make_routing(balanced, T, p.top_k, p.num_experts, seed)) << p.name;
    }
    // The seed draws which tokens meet which experts.
    EXPECT_NE(make_routing(balanced, 257, p.top_k, p.num_experts, seed),
              make_routing(balanced, 257, p.top_k, p.num_experts, seed + 1))
        << p.name;
  }
  expect_valid_routing(make_routing(balanced, 9, 8, 8, seed), 9, 8, 8);
}

TEST(CliBench, ImpossibleRoutingGivesNoIds) {
  EXPECT_TRUE(make_routing(Routing{}, 4, 9, 8, 1).empty());
  EXPECT_TRUE(make_routing(Routing{}, 4, 0, 8, 1).empty());
  EXPECT_TRUE(make_routing(Routing{}, -1, 2, 8, 1).empty());
}

TEST(CliBench, ParsersAcceptTheSpellingsAndNameBadValues) {
  Routing r;
  ASSERT_TRUE(parse_routing("uniform", &r).ok());
  EXPECT_FALSE(r.zipf);
  EXPECT_EQ(r.name(), "uniform");
  ASSERT_TRUE(parse_routing("balanced", &r).ok());
  EXPECT_TRUE(r.balanced);
  ASSERT_TRUE(parse_routing("zipf:1.2", &r).ok());
  EXPECT_FALSE(r.balanced);
  EXPECT_TRUE(r.zipf);
  EXPECT_DOUBLE_EQ(r.zipf_s, 1.2);
  EXPECT_EQ(r.name(), "zipf1.2");
  Routing again;
  ASSERT_TRUE(parse_routing(r.name(), &again).ok());
  EXPECT_DOUBLE_EQ(again.zipf_s, 1.2);
  for (const char* bad : {"zipf", "zipf:", "zipf:0", "zipf:-1", "zipf:abc", "zipf:1.2x", "zipf:nan", "normal"}) {
    const Status s = parse_routing(bad, &r);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find(bad), std::string::npos) << s.message();
  }

  Op op;
  ASSERT_TRUE(parse_op("gate_up", &op).ok());
  EXPECT_EQ(op, Op::kGateUp);
  ASSERT_TRUE(parse_op("down", &op).ok());
  EXPECT_EQ(op, Op::kDown);
  ASSERT_TRUE(parse_op("layer", &op).ok());
  EXPECT_EQ(op, Op::kLayer);
  const Status bad_op = parse_op("gateup", &op);
  EXPECT_EQ(bad_op.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad_op.message().find("'gateup'"), std::string::npos) << bad_op.message();

  Schedule sc;
  ASSERT_TRUE(parse_schedule("rect", &sc).ok());
  EXPECT_EQ(sc, Schedule::kRect);
  ASSERT_TRUE(parse_schedule("compact", &sc).ok());
  EXPECT_EQ(sc, Schedule::kCompact);
  EXPECT_EQ(parse_schedule("dense", &sc).code(), StatusCode::kInvalidArgument);
}

TEST(CliBench, CountWorkCountsFlopsAndOnlyTheExpertsHit) {
  BenchCase c;
  c.preset = *find_preset("qwen3-30b-a3b");  // E 128, k 8, H 2048, F 768
  c.tokens = 2;
  // Token 0 and token 1 share experts 0..3: 12 distinct experts.
  const std::vector<int32_t> ids = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 8, 9, 10, 11};
  const double pairs = 16, H = 2048, F = 768, hit = 12;
  double flops = 0, bytes = 0;

  c.op = Op::kGateUp;
  count_work(c, ids, &flops, &bytes);
  EXPECT_DOUBLE_EQ(flops, 2 * pairs * (2 * F) * H);
  EXPECT_DOUBLE_EQ(bytes, hit * (2 * F) * (H / 2 + H / 16));

  c.op = Op::kDown;
  count_work(c, ids, &flops, &bytes);
  EXPECT_DOUBLE_EQ(flops, 2 * pairs * H * F);
  EXPECT_DOUBLE_EQ(bytes, hit * H * (F / 2 + F / 16));

  c.op = Op::kLayer;
  count_work(c, ids, &flops, &bytes);
  EXPECT_DOUBLE_EQ(flops, 2 * pairs * (2 * F) * H + 2 * pairs * H * F);
  EXPECT_DOUBLE_EQ(bytes, hit * ((2 * F) * (H / 2 + H / 16) + H * (F / 2 + F / 16)));

  // Bytes never exceed the whole tensor, however many tokens.
  c.op = Op::kGateUp;
  c.tokens = 1024;
  count_work(c, make_routing(Routing{}, 1024, 8, 128, 7), &flops, &bytes);
  EXPECT_LE(bytes, 128 * (2 * F) * (H / 2 + H / 16));
}

// The GPU runner's interleaved rounds: for groups of 1-8 cases and 4
// rotations, no two consecutive calls share a rotation and every case meets
// every rotation within 4 rounds.
TEST(CliBench, InterleavedRoundsNeverRepeatARotationBackToBack) {
  constexpr int kRotations = 4;
  for (int n = 1; n <= 8; ++n) {
    const int step = interleave_step(n, kRotations);
    ASSERT_GE(step, 1) << "n = " << n;
    ASSERT_LT(step, kRotations) << "n = " << n;
    int previous = -1;
    for (int i = 0; i < 3 * kRotations; ++i)
      for (int j = 0; j < n; ++j) {
        const int rotation = (i + j * step) % kRotations;
        EXPECT_NE(rotation, previous) << "n = " << n << ", round " << i << ", case " << j;
        previous = rotation;
      }
    for (int j = 0; j < n; ++j) {
      std::vector<bool> seen(kRotations, false);
      for (int i = 0; i < kRotations; ++i) seen[size_t((i + j * step) % kRotations)] = true;
      EXPECT_EQ(std::count(seen.begin(), seen.end(), true), kRotations) << "n = " << n << ", case " << j;
    }
  }
}

TEST(CliBench, RandomInputsAreDeterministicAndInRange) {
  const uint64_t seed = testing::test_seed();
  const ExpertWeights w = random_expert_weights(3, 64, 128, seed);
  ASSERT_EQ(w.codes.size(), 3u * 64 * 64);
  ASSERT_EQ(w.scales.size(), 3u * 64 * 8);
  ASSERT_EQ(w.alpha.size(), 3u);
  for (uint8_t s : w.scales) {
    ASSERT_GE(s, 0x28);
    ASSERT_LE(s, 0x48);
  }
  EXPECT_TRUE(validate_weights(w.view(), "random").ok());
  const ExpertWeights again = random_expert_weights(3, 64, 128, seed);
  EXPECT_EQ(w.codes, again.codes);
  EXPECT_EQ(w.scales, again.scales);
  // Not a constant fill: both nibbles take many values.
  std::set<int> low, high;
  for (uint8_t c : w.codes) {
    low.insert(c & 15);
    high.insert(c >> 4);
  }
  EXPECT_EQ(low.size(), 16u);
  EXPECT_EQ(high.size(), 16u);

  const auto x = random_activations(1000, seed);
  for (float v : x) {
    ASSERT_GE(v, -1.0f);
    ASSERT_LT(v, 1.0f);
  }
  EXPECT_EQ(x, random_activations(1000, seed));

  const auto rw = random_route_weights(50, 8, seed);
  for (int t = 0; t < 50; ++t) {
    double sum = 0;
    for (int j = 0; j < 8; ++j) {
      ASSERT_GT(rw[t * 8 + j], 0.0f);
      sum += rw[t * 8 + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-5);
  }
}

}  // namespace
}  // namespace nvfp4moe::bench
