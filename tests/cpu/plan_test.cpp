// Property tests of the routing plan. Every invariant of plan.hpp is checked
// from its definition, independently of how build_routing_plan computes it.
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "nvfp4moe/plan.hpp"
#include "test_util.hpp"

namespace nvfp4moe {
namespace {

using testing::random_ids;
using testing::test_seed;

// Checks every documented property of `plan` against the ids it was built from.
void expect_plan_invariants(const std::vector<int32_t>& ids, int64_t T, int64_t k, int64_t E, int32_t block_rows,
                            const RoutingPlan& plan, int32_t light_max_rows = 0, int32_t broad_rows = 0) {
  const int64_t P = T * k;
  ASSERT_EQ(plan.num_tokens, T);
  ASSERT_EQ(plan.top_k, k);
  ASSERT_EQ(plan.num_experts, E);
  ASSERT_EQ(plan.block_rows, block_rows);
  ASSERT_EQ(plan.counts.size(), static_cast<size_t>(E));
  ASSERT_EQ(plan.offsets.size(), static_cast<size_t>(E + 1));
  ASSERT_EQ(plan.sorted_src.size(), static_cast<size_t>(P));
  ASSERT_EQ(plan.inverse.size(), static_cast<size_t>(P));

  // counts: a direct tally; their sum is T*k.
  std::vector<int32_t> tally(E, 0);
  for (int64_t p = 0; p < P; ++p) ++tally[ids[p]];
  EXPECT_EQ(plan.counts, tally);
  int64_t sum = 0;
  for (int32_t c : plan.counts) sum += c;
  EXPECT_EQ(sum, P);
  EXPECT_EQ(plan.max_count, E > 0 ? *std::max_element(tally.begin(), tally.end()) : 0);

  // offsets: exclusive scan, offsets[E] = T*k.
  EXPECT_EQ(plan.offsets[0], 0);
  for (int64_t e = 0; e < E; ++e) EXPECT_EQ(plan.offsets[e + 1] - plan.offsets[e], tally[e]) << "e = " << e;
  EXPECT_EQ(plan.offsets[E], P);

  // sorted_src: a permutation of the pair indices; row r belongs to the expert
  // whose offset range holds r; within an expert pair indices strictly ascend
  // (stability: tokens ascend, and a token appears at most once per expert).
  std::vector<char> seen(P, 0);
  for (int64_t e = 0; e < E; ++e) {
    for (int32_t r = plan.offsets[e]; r < plan.offsets[e + 1]; ++r) {
      const int32_t p = plan.sorted_src[r];
      ASSERT_GE(p, 0);
      ASSERT_LT(p, P);
      EXPECT_FALSE(seen[p]) << "pair " << p << " listed twice";
      seen[p] = 1;
      EXPECT_EQ(ids[p], e) << "row " << r;
      if (r > plan.offsets[e]) EXPECT_LT(plan.sorted_src[r - 1], p) << "row " << r << " breaks stability";
    }
  }
  for (int64_t p = 0; p < P; ++p) EXPECT_TRUE(seen[p]) << "pair " << p << " missing";

  // inverse is the inverse permutation.
  for (int64_t p = 0; p < P; ++p) EXPECT_EQ(plan.sorted_src[plan.inverse[p]], p);
  for (int64_t r = 0; r < P; ++r) EXPECT_EQ(plan.inverse[plan.sorted_src[r]], r);

  // jobs: per expert, consecutive tiles of at most block_rows rows that cover
  // its rows exactly once, in order; experts ascend; tile_rows follows policy.
  // Broad experts (takes_broad_tiles) come after the regular ones, from
  // broad_jobs_begin, in tiles of broad_rows; light experts (1 ..
  // light_max_rows rows) after all the others, from light_jobs_begin; each
  // class by expert.
  EXPECT_EQ(plan.light_max_rows, light_max_rows);
  EXPECT_EQ(plan.broad_rows, broad_rows);
  enum Pass { kRegular, kBroad, kLight };
  size_t j = 0;
  for (const Pass pass : {kRegular, kBroad, kLight}) {
    if (pass == kBroad) EXPECT_EQ(plan.broad_jobs_begin, static_cast<int32_t>(j));
    if (pass == kLight) EXPECT_EQ(plan.light_jobs_begin, static_cast<int32_t>(j));
    const int32_t tile = pass == kBroad ? broad_rows : block_rows;
    for (int64_t e = 0; e < E; ++e) {
      const bool light = tally[e] > 0 && tally[e] <= light_max_rows;
      const bool broad = !light && takes_broad_tiles(tally[e], block_rows, broad_rows);
      if ((pass == kLight) != light || (pass == kBroad) != broad) continue;
      int32_t next = plan.offsets[e];
      while (next < plan.offsets[e + 1]) {
        ASSERT_LT(j, plan.jobs.size()) << "expert " << e << " rows from " << next << " not covered";
        const ExpertJob& job = plan.jobs[j];
        EXPECT_EQ(job.expert, e);
        EXPECT_EQ(job.row_begin, next);
        const int32_t expect_rows = std::min<int32_t>(tile, plan.offsets[e + 1] - next);
        EXPECT_EQ(job.num_rows, expect_rows);
        EXPECT_GE(job.num_rows, 1);
        EXPECT_LE(job.num_rows, tile);
        EXPECT_EQ(job.tile_rows, job_tile_rows(job.num_rows, tile));
        next += std::max(job.num_rows, 1);
        ++j;
      }
    }
  }
  EXPECT_EQ(j, plan.jobs.size()) << "jobs beyond the routed rows";
}

TEST(PlanTest, RandomRoutingSatisfiesEveryInvariant) {
  std::mt19937_64 rng(test_seed());
  for (int iter = 0; iter < 60; ++iter) {
    const int64_t E = std::uniform_int_distribution<int64_t>(1, 70)(rng);
    const int64_t k = std::uniform_int_distribution<int64_t>(1, std::min<int64_t>(E, 9))(rng);
    const int64_t T = std::uniform_int_distribution<int64_t>(0, 400)(rng);
    const int32_t br = std::vector<int32_t>{1, 3, 16, 64, 128}[iter % 5];
    // Light experts in every third plan, broad ones in every other (iter % 3,
    // % 2 and % 5 cover every combination).
    const int32_t light = iter % 3 == 0 ? std::min<int32_t>(br, 1 + int32_t(iter % 40)) : 0;
    const int32_t broad = iter % 2 == 0 ? br + 1 + br / 4 : 0;
    const auto ids = random_ids(rng, T, k, E);
    RoutingPlan plan;
    ASSERT_TRUE(build_routing_plan(ids.data(), T, k, E, PlanOptions{br, light, broad}, &plan).ok());
    SCOPED_TRACE("T=" + std::to_string(T) + " k=" + std::to_string(k) + " E=" + std::to_string(E) +
                 " block_rows=" + std::to_string(br) + " light_max_rows=" + std::to_string(light) +
                 " broad_rows=" + std::to_string(broad));
    expect_plan_invariants(ids, T, k, E, br, plan, light, broad);
  }
}

TEST(PlanTest, SkewedRoutingWithEmptyExperts) {
  std::mt19937_64 rng(test_seed());
  // Only experts {2, 5, 11} of 16 are used: the others must have no job.
  const int64_t T = 300, k = 2, E = 16;
  const int32_t used[3] = {2, 5, 11};
  std::vector<int32_t> ids(T * k);
  for (int64_t t = 0; t < T; ++t) {
    const int a = std::uniform_int_distribution<int>(0, 2)(rng);
    ids[t * k] = used[a];
    ids[t * k + 1] = used[(a + 1 + std::uniform_int_distribution<int>(0, 1)(rng)) % 3];
  }
  RoutingPlan plan;
  ASSERT_TRUE(build_routing_plan(ids.data(), T, k, E, PlanOptions{64}, &plan).ok());
  expect_plan_invariants(ids, T, k, E, 64, plan);
  for (const ExpertJob& job : plan.jobs) EXPECT_TRUE(job.expert == 2 || job.expert == 5 || job.expert == 11);
}

// Experts 0 (150 rows) and 3 (40) are regular, 1 (32) and 2 (1) light at
// light_max_rows = 32: the light experts' jobs follow, and the other jobs
// are those of the same plan without light experts.
TEST(PlanTest, LightExpertsComeLast) {
  const int64_t k = 1, E = 5;
  std::vector<int32_t> ids;
  for (const auto& [e, rows] : std::vector<std::pair<int32_t, int>>{{0, 150}, {1, 32}, {2, 1}, {3, 40}})
    ids.insert(ids.end(), size_t(rows), e);
  std::mt19937_64 rng(test_seed());
  std::shuffle(ids.begin(), ids.end(), rng);
  const int64_t T = int64_t(ids.size());
  RoutingPlan light, single;
  ASSERT_TRUE(build_routing_plan(ids.data(), T, k, E, PlanOptions{128, 32}, &light).ok());
  ASSERT_TRUE(build_routing_plan(ids.data(), T, k, E, PlanOptions{128}, &single).ok());
  expect_plan_invariants(ids, T, k, E, 128, light, 32);
  ASSERT_EQ(light.jobs.size(), 5u);
  EXPECT_EQ(light.light_jobs_begin, 3);
  EXPECT_EQ(single.light_jobs_begin, 5);
  const int32_t expect_experts[5] = {0, 0, 3, 1, 2};
  for (int i = 0; i < 5; ++i) EXPECT_EQ(light.jobs[i].expert, expect_experts[i]) << i;
  EXPECT_EQ(light.jobs[3].num_rows, 32);
  EXPECT_EQ(light.jobs[3].tile_rows, 32);
  EXPECT_EQ(light.jobs[4].tile_rows, kMinTileRows);
  EXPECT_EQ(light.sorted_src, single.sorted_src);
}

// The broad line at block_rows = 128, broad_rows = 160, as plan.hpp states
// it, from the cost model's sums written out: broad where
// ceil(n / 160) * 288 < floor(n / 128) * 256 + (128 + width of the rest).
TEST(PlanTest, BroadTilesWhereTheyCostLess) {
  const auto in = [](int32_t n, int32_t lo, int32_t hi) { return n >= lo && n <= hi; };
  for (int32_t n = 0; n <= 1000; ++n) {
    const bool expect = in(n, 129, 160) || in(n, 257, 320) || in(n, 385, 480) || in(n, 513, 640) || in(n, 673, 800);
    const int64_t broad = (n + 159) / 160 * 288;
    const int32_t rest = n % 128;
    const int64_t regular = n / 128 * 256 + (rest > 0 ? 128 + job_tile_rows(rest, 128) : 0);
    EXPECT_EQ(n > 128 && broad < regular, takes_broad_tiles(n, 128, 160)) << n;
    if (n <= 800) EXPECT_EQ(expect, takes_broad_tiles(n, 128, 160)) << n;
  }
  EXPECT_FALSE(takes_broad_tiles(150, 128, 0));    // no broad class
  EXPECT_FALSE(takes_broad_tiles(150, 128, 128));  // not broader than the regular tile
  EXPECT_FALSE(takes_broad_tiles(150, 0, 0));      // no tile: no division by it
  EXPECT_FALSE(takes_broad_tiles(150, -5, 0));
  EXPECT_TRUE(takes_broad_tiles(INT32_MAX, 128, 160));  // no overflow near the int32 limit
}

// Experts 0 (150 rows: broad), 1 (200: regular), 2 (300: broad), 3 (32:
// light) and 4 (40: regular) at block_rows = 128, light_max_rows = 32,
// broad_rows = 160: the regular experts' jobs, then the broad ones' in
// 160-row tiles, then the light one; rows and sorted order as without
// classes.
TEST(PlanTest, BroadExpertsBetweenRegularAndLight) {
  const int64_t k = 1, E = 5;
  std::vector<int32_t> ids;
  for (const auto& [e, rows] : std::vector<std::pair<int32_t, int>>{{0, 150}, {1, 200}, {2, 300}, {3, 32}, {4, 40}})
    ids.insert(ids.end(), size_t(rows), e);
  std::mt19937_64 rng(test_seed());
  std::shuffle(ids.begin(), ids.end(), rng);
  const int64_t T = int64_t(ids.size());
  RoutingPlan plan, single;
  ASSERT_TRUE(build_routing_plan(ids.data(), T, k, E, PlanOptions{128, 32, 160}, &plan).ok());
  ASSERT_TRUE(build_routing_plan(ids.data(), T, k, E, PlanOptions{128}, &single).ok());
  expect_plan_invariants(ids, T, k, E, 128, plan, 32, 160);
  const int32_t expect_experts[] = {1, 1, 4, 0, 2, 2, 3};
  const int32_t expect_rows[] = {128, 72, 40, 150, 160, 140, 32};
  const int32_t expect_tiles[] = {128, 96, 64, 160, 160, 160, 32};
  ASSERT_EQ(plan.jobs.size(), 7u);
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(plan.jobs[i].expert, expect_experts[i]) << i;
    EXPECT_EQ(plan.jobs[i].num_rows, expect_rows[i]) << i;
    EXPECT_EQ(plan.jobs[i].tile_rows, expect_tiles[i]) << i;
  }
  EXPECT_EQ(plan.broad_jobs_begin, 3);
  EXPECT_EQ(plan.light_jobs_begin, 6);
  EXPECT_EQ(single.broad_jobs_begin, single.light_jobs_begin);
  EXPECT_EQ(plan.sorted_src, single.sorted_src);
  EXPECT_EQ(plan.offsets, single.offsets);
}

TEST(PlanTest, AllTokensOnOneExpert) {
  const int64_t T = 1000, k = 1, E = 8;
  std::vector<int32_t> ids(T, 6);
  RoutingPlan plan;
  ASSERT_TRUE(build_routing_plan(ids.data(), T, k, E, PlanOptions{128}, &plan).ok());
  expect_plan_invariants(ids, T, k, E, 128, plan);
  EXPECT_EQ(plan.max_count, 1000);
  ASSERT_EQ(plan.jobs.size(), 8u);  // 7 full tiles and one of 104 rows
  EXPECT_EQ(plan.jobs.back().num_rows, 1000 - 7 * 128);
  for (int64_t t = 0; t < T; ++t) EXPECT_EQ(plan.sorted_src[t], t);
}

TEST(PlanTest, ZeroTokensGiveAnEmptyPlan) {
  RoutingPlan plan;
  plan.jobs.push_back(ExpertJob{1, 2, 3, 4});  // stale content must be replaced
  ASSERT_TRUE(build_routing_plan(nullptr, 0, 4, 32, PlanOptions{}, &plan).ok());
  expect_plan_invariants({}, 0, 4, 32, 128, plan);
  EXPECT_TRUE(plan.jobs.empty());
  EXPECT_EQ(plan.max_count, 0);
  EXPECT_TRUE(rect_jobs(plan).empty());
}

TEST(PlanTest, TopOneKeepsTokenOrderPerExpert) {
  std::mt19937_64 rng(test_seed());
  const int64_t T = 257, E = 5;
  const auto ids = random_ids(rng, T, 1, E);
  RoutingPlan plan;
  ASSERT_TRUE(build_routing_plan(ids.data(), T, 1, E, PlanOptions{16}, &plan).ok());
  expect_plan_invariants(ids, T, 1, E, 16, plan);
}

TEST(PlanTest, TopKEqualsExpertCount) {
  std::mt19937_64 rng(test_seed());
  const int64_t T = 33, E = 6;
  const auto ids = random_ids(rng, T, E, E);
  RoutingPlan plan;
  ASSERT_TRUE(build_routing_plan(ids.data(), T, E, E, PlanOptions{8}, &plan).ok());
  expect_plan_invariants(ids, T, E, E, 8, plan);
  for (int32_t c : plan.counts) EXPECT_EQ(c, T);
}

TEST(PlanTest, SmallExampleExactArrays) {
  // T = 3, k = 2, E = 4: pairs 0..5 go to experts 2,0 | 1,2 | 2,3.
  const std::vector<int32_t> ids = {2, 0, 1, 2, 2, 3};
  RoutingPlan plan;
  ASSERT_TRUE(build_routing_plan(ids.data(), 3, 2, 4, PlanOptions{2}, &plan).ok());
  EXPECT_EQ(plan.counts, (std::vector<int32_t>{1, 1, 3, 1}));
  EXPECT_EQ(plan.offsets, (std::vector<int32_t>{0, 1, 2, 5, 6}));
  EXPECT_EQ(plan.sorted_src, (std::vector<int32_t>{1, 2, 0, 3, 4, 5}));
  EXPECT_EQ(plan.inverse, (std::vector<int32_t>{2, 0, 1, 3, 4, 5}));
  EXPECT_EQ(plan.max_count, 3);
  ASSERT_EQ(plan.jobs.size(), 5u);
  const int32_t expect[5][3] = {{0, 0, 1}, {1, 1, 1}, {2, 2, 2}, {2, 4, 1}, {3, 5, 1}};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(plan.jobs[i].expert, expect[i][0]);
    EXPECT_EQ(plan.jobs[i].row_begin, expect[i][1]);
    EXPECT_EQ(plan.jobs[i].num_rows, expect[i][2]);
    EXPECT_EQ(plan.jobs[i].tile_rows, 2);  // capped at block_rows
  }
}

TEST(PlanTest, TileRowsPolicy) {
  EXPECT_EQ(job_tile_rows(1, 128), 16);
  EXPECT_EQ(job_tile_rows(16, 128), 16);
  EXPECT_EQ(job_tile_rows(17, 128), 32);
  EXPECT_EQ(job_tile_rows(64, 128), 64);
  EXPECT_EQ(job_tile_rows(65, 128), 96);
  EXPECT_EQ(job_tile_rows(96, 128), 96);
  EXPECT_EQ(job_tile_rows(97, 128), 128);
  EXPECT_EQ(job_tile_rows(128, 128), 128);
  EXPECT_EQ(job_tile_rows(70, 100), 96);
  EXPECT_EQ(job_tile_rows(70, 80), 80);
  EXPECT_EQ(job_tile_rows(129, 256), 160);
  EXPECT_EQ(job_tile_rows(1, 8), 8);
  EXPECT_EQ(job_tile_rows(3, 3), 3);
  EXPECT_EQ(job_tile_rows(INT32_MAX, INT32_MAX), INT32_MAX);
  EXPECT_EQ(job_tile_rows((1 << 30) + 1, INT32_MAX), (1 << 30) + 32);
  for (int32_t br : {1, 16, 48, 128, 256}) {
    for (int32_t rows = 1; rows <= br; ++rows) {
      const int32_t tile = job_tile_rows(rows, br);
      EXPECT_GE(tile, std::min(rows, br));
      EXPECT_LE(tile, br);
      if (tile < br) {
        // One of 16, 32, 64, then a multiple of 32, and the smallest such.
        const bool pow2 = tile <= kPow2TileRowsMax && (tile & (tile - 1)) == 0;
        EXPECT_TRUE(pow2 || (tile > kPow2TileRowsMax && tile % kTileRowsStep == 0)) << "not a tile height: " << tile;
        EXPECT_GE(tile, kMinTileRows);
        const int32_t smaller = tile <= kPow2TileRowsMax ? tile / 2 : tile - kTileRowsStep;
        EXPECT_TRUE(tile == kMinTileRows || smaller < rows) << "not the smallest: " << tile << " for " << rows;
      }
    }
  }
}

TEST(PlanTest, RectJobsEnumerateEveryExpertTimesMaxTiles) {
  std::mt19937_64 rng(test_seed());
  for (int iter = 0; iter < 20; ++iter) {
    const int64_t E = std::uniform_int_distribution<int64_t>(1, 24)(rng);
    const int64_t k = std::uniform_int_distribution<int64_t>(1, std::min<int64_t>(E, 4))(rng);
    const int64_t T = std::uniform_int_distribution<int64_t>(1, 200)(rng);
    const int32_t br = std::vector<int32_t>{1, 7, 16, 32}[iter % 4];
    const auto ids = random_ids(rng, T, k, E);
    RoutingPlan plan;
    ASSERT_TRUE(build_routing_plan(ids.data(), T, k, E, PlanOptions{br}, &plan).ok());
    const std::vector<ExpertJob> rect = rect_jobs(plan);
    const int64_t tiles = (plan.max_count + br - 1) / br;
    ASSERT_EQ(rect.size(), static_cast<size_t>(E * tiles));
    std::vector<ExpertJob> non_empty;
    for (int64_t e = 0; e < E; ++e) {
      for (int64_t i = 0; i < tiles; ++i) {
        const ExpertJob& job = rect[e * tiles + i];
        EXPECT_EQ(job.expert, e);
        EXPECT_EQ(job.tile_rows, br);
        const int64_t begin = std::min<int64_t>(i * br, plan.counts[e]);
        const int64_t end = std::min<int64_t>((i + 1) * br, plan.counts[e]);
        EXPECT_EQ(job.row_begin, plan.offsets[e] + begin);
        EXPECT_EQ(job.num_rows, end - begin);
        EXPECT_GE(job.num_rows, 0);
        EXPECT_LE(job.row_begin + job.num_rows, plan.offsets[e + 1]);
        if (job.num_rows > 0) non_empty.push_back(job);
      }
    }
    // The non-empty rectangular tiles are exactly the compact jobs.
    ASSERT_EQ(non_empty.size(), plan.jobs.size());
    for (size_t i = 0; i < non_empty.size(); ++i) {
      EXPECT_EQ(non_empty[i].expert, plan.jobs[i].expert);
      EXPECT_EQ(non_empty[i].row_begin, plan.jobs[i].row_begin);
      EXPECT_EQ(non_empty[i].num_rows, plan.jobs[i].num_rows);
    }
  }
}

// ---- errors -----------------------------------------------------------------

void expect_error(const Status& s, StatusCode code, const std::string& fragment) {
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), code) << s.to_string();
  EXPECT_NE(s.message().find(fragment), std::string::npos) << "message: " << s.message();
}

TEST(PlanTest, OutOfRangeIdIsNamed) {
  const std::vector<int32_t> ids = {0, 1, 2, 3, 4, 130};
  EXPECT_TRUE(validate_ids(ids.data(), 3, 2, 131).ok());
  std::vector<int32_t> bad = {0, 1, 2, 3, 4, 130};
  expect_error(validate_ids(bad.data(), 3, 2, 8), StatusCode::kInvalidArgument,
               "ids[2][1] = 130 is out of range [0, 8)");
  bad[3] = -1;
  expect_error(validate_ids(bad.data(), 3, 2, 8), StatusCode::kInvalidArgument,
               "ids[1][1] = -1 is out of range [0, 8)");
  RoutingPlan plan;
  plan.num_tokens = 77;
  expect_error(build_routing_plan(bad.data(), 3, 2, 8, PlanOptions{}, &plan), StatusCode::kInvalidArgument,
               "ids[1][1] = -1");
  EXPECT_EQ(plan.num_tokens, 77) << "a failed build must leave the plan untouched";
}

TEST(PlanTest, DuplicateExpertWithinTokenIsNamed) {
  const std::vector<int32_t> ids = {0, 1, 2, 3, 5, 4, 6, 5};
  expect_error(validate_ids(ids.data(), 2, 4, 8), StatusCode::kInvalidArgument,
               "ids[1][0] and ids[1][3] are both expert 5");
  RoutingPlan plan;
  expect_error(build_routing_plan(ids.data(), 2, 4, 8, PlanOptions{}, &plan), StatusCode::kInvalidArgument,
               "both expert 5");
  // The same expert in different tokens is fine.
  const std::vector<int32_t> ok_ids = {5, 1, 5, 2};
  EXPECT_TRUE(validate_ids(ok_ids.data(), 2, 2, 8).ok());
}

TEST(PlanTest, BadSizesAreRejected) {
  const std::vector<int32_t> ids = {0, 1};
  expect_error(validate_ids(ids.data(), -1, 2, 8), StatusCode::kInvalidArgument, "num_tokens = -1");
  expect_error(validate_ids(ids.data(), 1, 0, 8), StatusCode::kInvalidArgument, "top_k = 0");
  expect_error(validate_ids(ids.data(), 1, 9, 8), StatusCode::kInvalidArgument, "top_k = 9");
  expect_error(validate_ids(ids.data(), 1, 2, 0), StatusCode::kInvalidArgument, "num_experts = 0");
  expect_error(validate_ids(ids.data(), 1, 2, -3), StatusCode::kInvalidArgument, "num_experts = -3");
  expect_error(validate_ids(nullptr, 1, 2, 8), StatusCode::kInvalidArgument, "ids is null");
  expect_error(validate_ids(ids.data(), 1, 2, int64_t{1} << 32), StatusCode::kOutOfRange, "num_experts");
  RoutingPlan plan;
  expect_error(build_routing_plan(ids.data(), 1, 2, 8, PlanOptions{0}, &plan), StatusCode::kInvalidArgument,
               "block_rows = 0");
  expect_error(build_routing_plan(ids.data(), 1, 2, 8, PlanOptions{-4}, &plan), StatusCode::kInvalidArgument,
               "block_rows = -4");
  expect_error(build_routing_plan(ids.data(), 1, 2, 8, PlanOptions{32, 33}, &plan), StatusCode::kInvalidArgument,
               "light_max_rows = 33");
  expect_error(build_routing_plan(ids.data(), 1, 2, 8, PlanOptions{32, -1}, &plan), StatusCode::kInvalidArgument,
               "light_max_rows = -1");
  expect_error(build_routing_plan(ids.data(), 1, 2, 8, PlanOptions{128, 32, 128}, &plan),
               StatusCode::kInvalidArgument, "broad_rows = 128");
  expect_error(build_routing_plan(ids.data(), 1, 2, 8, PlanOptions{128, 0, -160}, &plan),
               StatusCode::kInvalidArgument, "broad_rows = -160");
  expect_error(build_routing_plan(ids.data(), 1, 2, 8, PlanOptions{}, nullptr), StatusCode::kInvalidArgument,
               "out");
}

TEST(PlanTest, PairCountBeyondInt32IsRefused) {
  // Checked before ids are read, so no buffer of that size is needed.
  const int32_t dummy = 0;
  expect_error(validate_ids(&dummy, int64_t{1} << 29, 8, 128), StatusCode::kOutOfRange, "exceeds the int32 limit");
  expect_error(validate_ids(&dummy, INT32_MAX, 2, 128), StatusCode::kOutOfRange, "num_tokens * top_k");
  RoutingPlan plan;
  expect_error(build_routing_plan(&dummy, int64_t{1} << 40, 1, 1, PlanOptions{}, &plan), StatusCode::kOutOfRange,
               "int32");
}

}  // namespace
}  // namespace nvfp4moe
