// The CUDA backend's host policies (launch.hpp), on the host: no device
// needed. Each worked example in the comments is checked here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "cuda/bench_support.hpp"
#include "cuda/gemm_params.hpp"
#include "cuda/launch.hpp"
#include "nvfp4moe/cuda.hpp"
#include "nvfp4moe/plan.hpp"
#include "test_util.hpp"

namespace nvfp4moe::testing {
namespace {

TEST(CudaHostPolicy, KSplitsFollowTheWorkedExample) {
  // qwen3 gate_up (k = 8, N = 1536, K = 2048) on 132 SMs: 3 splits at T = 1, none at T = 16.
  EXPECT_EQ(3, cuda::choose_k_splits(1, 8, 128, 1536, 2048, cuda::kBlockTNarrow, 132));
  EXPECT_EQ(1, cuda::choose_k_splits(16, 8, 128, 1536, 2048, cuda::kBlockTNarrow, 132));
  EXPECT_EQ(1, cuda::choose_k_splits(1, 8, 128, 1536, 2048, cuda::kBlockTWide, 132));  // wide tiles never split
}

// Narrow tiles up to 24 rows per expert on average, medium up to 32, wide
// from 33: qwen3 (k = 8, E = 128) at T = 128, 384, 385, 512, 513; mixtral
// (k = 2, E = 8) at T = 96, 128, 132. The average rounds up (T = 385 gives
// 24.06, so 25 rows).
TEST(CudaHostPolicy, TokenTileFollowsRowsPerExpert) {
  EXPECT_EQ(cuda::kBlockTNarrow, cuda::choose_block_rows(128, 8, 128));
  EXPECT_EQ(cuda::kBlockTNarrow, cuda::choose_block_rows(384, 8, 128));
  EXPECT_EQ(cuda::kBlockTMedium, cuda::choose_block_rows(385, 8, 128));
  EXPECT_EQ(cuda::kBlockTMedium, cuda::choose_block_rows(512, 8, 128));
  EXPECT_EQ(cuda::kBlockTWide, cuda::choose_block_rows(513, 8, 128));
  EXPECT_EQ(cuda::kBlockTNarrow, cuda::choose_block_rows(96, 2, 8));
  EXPECT_EQ(cuda::kBlockTMedium, cuda::choose_block_rows(128, 2, 8));
  EXPECT_EQ(cuda::kBlockTWide, cuda::choose_block_rows(132, 2, 8));
  EXPECT_EQ(cuda::kBlockTNarrow, cuda::choose_block_rows(1, 8, 256));
  ASSERT_EQ(0, setenv("NVFP4MOE_BLOCK_ROWS", "128", 1));  // experiments: forced
  EXPECT_EQ(cuda::kBlockTWide, cuda::choose_block_rows(1, 8, 256));
  ASSERT_EQ(0, setenv("NVFP4MOE_BLOCK_ROWS", "160", 1));
  EXPECT_EQ(cuda::kBlockTBroad, cuda::choose_block_rows(1, 8, 256));
  ASSERT_EQ(0, setenv("NVFP4MOE_BLOCK_ROWS", "96", 1));  // no such kernel: ignored
  EXPECT_EQ(cuda::kBlockTNarrow, cuda::choose_block_rows(1, 8, 256));
  ASSERT_EQ(0, unsetenv("NVFP4MOE_BLOCK_ROWS"));
}

// Light experts over at least 32 experts at most 128 rows each on average,
// from 4096 routed rows, or from 2048 at 48 rows per expert: deepseek (k =
// 8, E = 256) at T = 512 to 4096 but not 256, qwen3 (E = 128) at T = 512 to
// 2048 but not 511 or 2049, gpt-oss (k = 4, E = 32) at T = 512 (64 rows per
// expert) to 1024 but not 511 or 1025, E = 64 at 3072 pairs (48 rows each)
// but not E = 65, never mixtral (E = 8). Then
// the plan's token tile is the wide one and light experts have at most 32
// rows.
TEST(CudaHostPolicy, LightExpertsFromLargeBatchesOverManyExperts) {
  const auto light = [](int64_t T, int64_t k, int64_t E) { return cuda::choose_plan_options(T, k, E); };
  EXPECT_EQ(cuda::kBlockTNarrow, light(512, 8, 256).light_max_rows);
  EXPECT_EQ(cuda::kBlockTWide, light(512, 8, 256).block_rows);
  EXPECT_EQ(0, light(256, 8, 256).light_max_rows);
  EXPECT_EQ(cuda::choose_block_rows(256, 8, 256), light(256, 8, 256).block_rows);
  EXPECT_EQ(cuda::kBlockTNarrow, light(4096, 8, 256).light_max_rows);
  EXPECT_EQ(0, light(4097, 8, 256).light_max_rows);
  EXPECT_EQ(cuda::kBlockTNarrow, light(512, 8, 128).light_max_rows);
  EXPECT_EQ(0, light(511, 8, 128).light_max_rows);
  EXPECT_EQ(cuda::kBlockTNarrow, light(2048, 8, 128).light_max_rows);
  EXPECT_EQ(0, light(2049, 8, 128).light_max_rows);
  EXPECT_EQ(cuda::kBlockTWide, light(2049, 8, 128).block_rows);
  EXPECT_EQ(cuda::kBlockTNarrow, light(512, 4, 32).light_max_rows);
  EXPECT_EQ(0, light(511, 4, 32).light_max_rows);  // 2044 pairs
  EXPECT_EQ(cuda::kBlockTNarrow, light(384, 8, 64).light_max_rows);  // 3072 pairs at 48 rows each
  EXPECT_EQ(0, light(384, 8, 65).light_max_rows);                     // 47.3 rows each
  EXPECT_EQ(cuda::kBlockTNarrow, light(1024, 4, 32).light_max_rows);
  EXPECT_EQ(0, light(1025, 4, 32).light_max_rows);
  EXPECT_EQ(0, light(8192, 2, 8).light_max_rows);
  ASSERT_EQ(0, setenv("NVFP4MOE_BLOCK_ROWS", "64", 1));  // a forced single tile
  EXPECT_EQ(0, light(2048, 8, 128).light_max_rows);
  EXPECT_EQ(cuda::kBlockTMedium, light(2048, 8, 128).block_rows);
  ASSERT_EQ(0, unsetenv("NVFP4MOE_BLOCK_ROWS"));
  ASSERT_EQ(0, setenv("NVFP4MOE_EXPERT_CLASSES", "1", 1));
  EXPECT_EQ(cuda::kBlockTNarrow, light(4, 2, 8).light_max_rows);
  ASSERT_EQ(0, setenv("NVFP4MOE_EXPERT_CLASSES", "0", 1));
  EXPECT_EQ(0, light(2048, 8, 128).light_max_rows);
  ASSERT_EQ(0, unsetenv("NVFP4MOE_EXPERT_CLASSES"));
}

// Broad experts where experts average at least 96 rows: qwen3 (k = 8,
// E = 128) from T = 1536, mixtral (k = 2, E = 8) from T = 384, gpt-oss
// (k = 4, E = 32) from 768, beside light experts or without them; only
// with the wide tile (a forced tile turns them off), and forced either way
// by NVFP4MOE_BROAD_EXPERTS.
TEST(CudaHostPolicy, BroadExpertsFromNinetySixRowsPerExpert) {
  const auto opt = [](int64_t T, int64_t k, int64_t E) { return cuda::choose_plan_options(T, k, E); };
  EXPECT_EQ(cuda::kBlockTBroad, opt(1536, 8, 128).broad_rows);
  EXPECT_EQ(cuda::kBlockTNarrow, opt(1536, 8, 128).light_max_rows);
  EXPECT_EQ(0, opt(1535, 8, 128).broad_rows);
  EXPECT_EQ(cuda::kBlockTBroad, opt(8192, 8, 128).broad_rows);
  EXPECT_EQ(0, opt(8192, 8, 128).light_max_rows);
  EXPECT_EQ(cuda::kBlockTWide, opt(8192, 8, 128).block_rows);
  EXPECT_EQ(cuda::kBlockTBroad, opt(384, 2, 8).broad_rows);
  EXPECT_EQ(0, opt(383, 2, 8).broad_rows);
  EXPECT_EQ(cuda::kBlockTBroad, opt(768, 4, 32).broad_rows);
  EXPECT_EQ(0, opt(767, 4, 32).broad_rows);
  EXPECT_EQ(0, opt(2048, 8, 256).broad_rows);  // deepseek at 64 rows per expert
  ASSERT_EQ(0, setenv("NVFP4MOE_BLOCK_ROWS", "128", 1));
  EXPECT_EQ(0, opt(2048, 8, 128).broad_rows);
  ASSERT_EQ(0, unsetenv("NVFP4MOE_BLOCK_ROWS"));
  ASSERT_EQ(0, setenv("NVFP4MOE_BROAD_EXPERTS", "1", 1));
  EXPECT_EQ(cuda::kBlockTBroad, opt(2048, 8, 256).broad_rows);
  EXPECT_EQ(0, opt(16, 8, 256).broad_rows);  // the narrow tile: no broad class beside it
  ASSERT_EQ(0, setenv("NVFP4MOE_BROAD_EXPERTS", "0", 1));
  EXPECT_EQ(0, opt(2048, 8, 128).broad_rows);
  ASSERT_EQ(0, unsetenv("NVFP4MOE_BROAD_EXPERTS"));
}

// The rect schedule plans the compact plan's token tile without classes
// (one rectangular grid, the upstream baseline); compact keeps its classes.
// Over the four presets' shapes and T = 1..8192, with the classes forced on
// too, since rect must drop them whatever turned them on.
TEST(CudaHostPolicy, RectPlansWithoutClasses) {
  struct Shape { int64_t k, E; };
  for (const bool forced : {false, true}) {
    if (forced) ASSERT_EQ(0, setenv("NVFP4MOE_BROAD_EXPERTS", "1", 1));
    for (const Shape sh : {Shape{8, 128}, Shape{8, 256}, Shape{4, 32}, Shape{2, 8}}) {
      for (int64_t T = 1; T <= 8192; T *= 2) {
        const PlanOptions compact = cuda::choose_plan_options(Schedule::kCompact, T, sh.k, sh.E);
        const PlanOptions plain = cuda::choose_plan_options(T, sh.k, sh.E);
        const PlanOptions rect = cuda::choose_plan_options(Schedule::kRect, T, sh.k, sh.E);
        EXPECT_EQ(plain.block_rows, compact.block_rows);
        EXPECT_EQ(plain.light_max_rows, compact.light_max_rows);
        EXPECT_EQ(plain.broad_rows, compact.broad_rows);
        EXPECT_EQ(compact.block_rows, rect.block_rows) << "T=" << T << " E=" << sh.E;
        EXPECT_EQ(0, rect.light_max_rows) << "T=" << T << " E=" << sh.E;
        EXPECT_EQ(0, rect.broad_rows) << "T=" << T << " E=" << sh.E;
      }
    }
    if (forced) ASSERT_EQ(0, unsetenv("NVFP4MOE_BROAD_EXPERTS"));
  }
  // The shape that runs every class in compact: rect drops them all.
  ASSERT_NE(0, cuda::choose_plan_options(Schedule::kCompact, 2048, 8, 128).light_max_rows);
  ASSERT_NE(0, cuda::choose_plan_options(Schedule::kCompact, 2048, 8, 128).broad_rows);
}

// The plan kernel's geometry, computed on the host: the worked example of
// plan_grid_ctas (T = 2048, k = 8, E = 128: 32 CTAs of 16 chunks, one chunk
// per warp), then for other shapes the CTAs' and warps' ranges cover every
// 32-pair chunk (the last CTAs may get none: 3126 chunks on 132 CTAs of 24,
// which the kernel's seam test runs), key_bits holds the largest id, and a
// counts row is a power of two of at least 4 and E, below twice that.
TEST(CudaHostPolicy, PlanGeometryCoversEveryChunk) {
  const cuda::PlanGeometry g = cuda::plan_geometry(16384, 8, 128, cuda::plan_grid_ctas(16384, 128, 132));
  EXPECT_EQ(16u, g.cta_chunks);
  EXPECT_EQ(1u, g.warp_chunks);
  EXPECT_EQ(0, g.slot_step);
  EXPECT_EQ(7, g.key_bits);
  EXPECT_EQ(5, g.quad_bits);
  struct Shape { int64_t pairs, k, E; };
  for (const Shape& sh : {Shape{1, 1, 1}, Shape{24, 8, 256}, Shape{2049, 1, 8}, Shape{4098, 3, 10}, Shape{21007, 7, 101},
                          Shape{32000, 32, 1024}, Shape{60000, 3, 5}, Shape{int64_t(1) << 20, 8, 128},
                          Shape{100002, 2, 16}}) {
    SCOPED_TRACE(::testing::Message() << "pairs=" << sh.pairs << " k=" << sh.k << " E=" << sh.E);
    const int ctas = cuda::plan_grid_ctas(sh.pairs, sh.E, 132);
    ASSERT_LE(uint32_t(ctas), cuda::kGridBarrierSpan);
    const cuda::PlanGeometry s = cuda::plan_geometry(sh.pairs, sh.k, sh.E, ctas);
    const int64_t chunks = (sh.pairs + 31) / 32;
    EXPECT_GE(int64_t(s.cta_chunks) * ctas, chunks);
    EXPECT_LT(int64_t(s.cta_chunks - 1) * ctas, chunks);  // no smaller range would do
    EXPECT_GE(int64_t(s.warp_chunks) * cuda::kPlanWarps, int64_t(s.cta_chunks));
    EXPECT_EQ(s.slot_step, int32_t(32 % sh.k));
    EXPECT_GE(int64_t(1) << s.key_bits, sh.E);
    if (s.key_bits > 0) EXPECT_LT(int64_t(1) << (s.key_bits - 1), sh.E);
    const int64_t stride = cuda::plan_counts_stride(sh.E), least = std::max<int64_t>(sh.E, 4);
    EXPECT_EQ(stride, int64_t(4) << s.quad_bits);
    EXPECT_GE(stride, least);
    EXPECT_LT(stride, 2 * least);
  }
}

// Each class's jobs bound holds for the CPU plan with light and broad
// experts (the device plan's mirror): a light expert has one job, a regular
// one more than 32 rows, a broad one more than 128; the plans run from ~1 to
// ~750 rows per expert.
TEST(CudaHostPolicy, ClassJobBoundsHoldForPlansWithClasses) {
  std::mt19937_64 rng(test_seed());
  for (int trial = 0; trial < 100; ++trial) {
    const int64_t E = 32 + int64_t(rng() % 200), k = 1 + int64_t(rng() % 8);
    const int64_t T = 1 + int64_t(rng() % 3000), used = k + int64_t(rng() % (E - k + 1));
    const std::vector<int32_t> ids = random_ids(rng, T, k, used);
    RoutingPlan plan;
    ASSERT_TRUE(build_routing_plan(ids.data(), T, k, E, PlanOptions{128, 32, 160}, &plan).ok());
    const int64_t broad = plan.light_jobs_begin - plan.broad_jobs_begin;
    const int64_t light = int64_t(plan.jobs.size()) - plan.light_jobs_begin;
    EXPECT_LE(plan.broad_jobs_begin,
              cuda::compact_class_jobs_bound(T * k, E, 128, cuda::ExpertClass::kRegular, 32, 128)) << "trial " << trial;
    EXPECT_LE(broad, cuda::compact_class_jobs_bound(T * k, E, 160, cuda::ExpertClass::kBroad, 32, 128))
        << "trial " << trial;
    EXPECT_LE(light, cuda::compact_class_jobs_bound(T * k, E, 32, cuda::ExpertClass::kLight, 32, 128))
        << "trial " << trial;
  }
}

// The bench's figure over calls that cycle through routings of different
// cost: the mean of each routing's median, not the mixture's median (which
// falls on either mode). Call i runs routing i % 4: routings 0, 1 take 48 us,
// 2, 3 take 64 us, one call of routing 1 is an outlier.
TEST(BenchFigure, MeanOfRoutingMediansIsStableOnBimodalCalls) {
  namespace bs = cuda::bench_support;
  std::vector<float> t;
  for (int i = 0; i < 30; ++i) t.push_back(i % 4 < 2 ? 48.0f : 64.0f);
  t[5] = 500.0f;  // routing 1
  EXPECT_FLOAT_EQ(56.0f, float(bs::mean_of_group_medians(t, 4)));
  // The plain median lands on a mode, and one outlier moves it to the
  // other: 15 calls of 48 us, 14 of 64 us and the outlier give 64.
  EXPECT_FLOAT_EQ(64.0f, float(bs::mean_of_group_medians(t, 1)));
  t[5] = 48.0f;
  EXPECT_FLOAT_EQ(48.0f, float(bs::mean_of_group_medians(t, 1)));
  EXPECT_FLOAT_EQ(56.0f, float(bs::mean_of_group_medians(t, 4)));
  // More groups than calls: the empty groups do not count.
  EXPECT_FLOAT_EQ(50.0f, float(bs::mean_of_group_medians({40.0f, 60.0f}, 4)));
  EXPECT_EQ(0.0, bs::mean_of_group_medians({}, 4));
}

// NVFP4MOE_K_SPLITS (experiments) gets the same rule as the policy: no split
// with an empty K range, e.g. 4 forced splits of 9 K blocks become 3 of 3.
TEST(CudaHostPolicy, ForcedKSplitsLeaveNoEmptySplit) {
  ASSERT_EQ(0, setenv("NVFP4MOE_K_SPLITS", "4", 1));
  EXPECT_EQ(3, cuda::choose_k_splits(1, 8, 128, 1536, 9 * 64, cuda::kBlockTNarrow, 132));
  EXPECT_EQ(4, cuda::choose_k_splits(1, 8, 128, 1536, 2048, cuda::kBlockTNarrow, 132));
  EXPECT_EQ(4, cuda::choose_k_splits(2048, 2, 8, 4096, 14336, cuda::kBlockTWide, 132));  // every tile obeys it
  ASSERT_EQ(0, setenv("NVFP4MOE_K_SPLITS", "100", 1));
  EXPECT_EQ(9, cuda::choose_k_splits(1, 8, 128, 1536, 9 * 64, cuda::kBlockTNarrow, 132));
  ASSERT_EQ(0, unsetenv("NVFP4MOE_K_SPLITS"));
  for (int64_t kb = 1; kb <= 64; ++kb) {
    const int32_t s = cuda::choose_k_splits(1, 1, 1, 64, kb * 64, cuda::kBlockTNarrow, 132);
    const int64_t per = (kb + s - 1) / s;
    EXPECT_LT(int64_t(s - 1) * per, kb) << "empty last split, K blocks " << kb;
  }
}

// The streamer never splits K by itself (launch.hpp); forced, it leaves no
// empty split and no more than kMaxStreamSplits.
TEST(CudaHostPolicy, StreamSplitsOnlyWhenForced) {
  for (int64_t T = 1; T <= cuda::kStreamMaxTokens; ++T)
    for (int64_t k : {64, 768, 2048, 7168, 14336, 1 << 20}) EXPECT_EQ(1, cuda::choose_stream_splits(T, k)) << T;
  for (int forced = 2; forced <= cuda::kMaxStreamSplits + 2; ++forced) {
    ASSERT_EQ(0, setenv("NVFP4MOE_STREAM_SPLITS", std::to_string(forced).c_str(), 1));
    for (int64_t kb = 1; kb <= 64; ++kb) {
      const int32_t s = cuda::choose_stream_splits(1, kb * 64);
      const int64_t per = (kb + s - 1) / s;
      EXPECT_LT(int64_t(s - 1) * per, kb) << "empty last split, K blocks " << kb << ", forced " << forced;
      EXPECT_LE(s, std::min<int64_t>(cuda::kMaxStreamSplits, kb));
    }
  }
  ASSERT_EQ(0, setenv("NVFP4MOE_STREAM_SPLITS", "4", 1));
  EXPECT_EQ(3, cuda::choose_stream_splits(1, 9 * 64));  // 4 of 3 blocks would leave the last empty
  ASSERT_EQ(0, unsetenv("NVFP4MOE_STREAM_SPLITS"));
}

// The streamer takes up to kStreamCtaRows tokens for every expert and
// shape, up to kStreamMaxTokens where the pairs are at most
// kStreamRowGroupPairsPerExpert per expert, and never more than
// kStreamMaxPairs pairs (one id per consumer thread); no K is too long for
// it (its ring carries the activation rows).
TEST(CudaHostPolicy, WeightStreamerCutFollowsTokensAndPairs) {
  EXPECT_TRUE(cuda::use_weight_streamer(1, 8, 128));
  EXPECT_TRUE(cuda::use_weight_streamer(8, 2, 8));     // mixtral: 2 pairs per expert
  EXPECT_TRUE(cuda::use_weight_streamer(12, 2, 8));    // 3
  EXPECT_FALSE(cuda::use_weight_streamer(13, 2, 8));   // 3.25
  EXPECT_FALSE(cuda::use_weight_streamer(16, 2, 8));   // 4
  EXPECT_TRUE(cuda::use_weight_streamer(16, 8, 128));  // qwen3: 1
  EXPECT_TRUE(cuda::use_weight_streamer(16, 8, 256));  // deepseek: 0.5
  EXPECT_TRUE(cuda::use_weight_streamer(16, 4, 32));   // gpt-oss: 2
  EXPECT_TRUE(cuda::use_weight_streamer(8, 32, 32));   // 256 pairs, 8 per expert
  EXPECT_FALSE(cuda::use_weight_streamer(9, 32, 1024));  // 288 pairs
  EXPECT_TRUE(cuda::use_weight_streamer(16, 16, 1024));
  EXPECT_FALSE(cuda::use_weight_streamer(16, 17, 1024));
  EXPECT_FALSE(cuda::use_weight_streamer(cuda::kStreamMaxTokens + 1, 1, 1024));
  EXPECT_FALSE(cuda::use_weight_streamer(0, 8, 128));
  EXPECT_LE(cuda::kStreamMaxTokens, cuda::kStreamKernelMaxTokens);
}

// The streamer stages small batches' rows whole (BF16 up to
// kStreamStagedMaxTokens rows, F32 at T = 1), where they leave four weight
// slots in kStreamTwoCtaBytes (one row: K <= 30656), at a pitch of their K
// and 16 bytes; the slots then hold weights only. The rows come out of the
// three-per-SM budget where they fit, else out of the two-per-SM one.
// Mixtral's down (K = 14336, 28 KB a row) at T = 1: 128 CTAs, 7 stages; at
// T = 2 two rows fit, at T = 3 the ring carries them.
TEST(CudaHostPolicy, StreamerStagesSmallBatchRows) {
  EXPECT_TRUE(cuda::streamer_stages_f32_row(1, 2048));
  EXPECT_TRUE(cuda::streamer_stages_f32_row(1, 30656));
  EXPECT_FALSE(cuda::streamer_stages_f32_row(1, 30720));
  for (int64_t T = 2; T <= cuda::kStreamKernelMaxTokens; ++T) EXPECT_FALSE(cuda::streamer_stages_f32_row(T, 2048));
  EXPECT_EQ(size_t(14352), cuda::weight_streamer_staged_pitch(112));
  EXPECT_EQ(4, cuda::streamer_staged_rows(4, 7168, false));  // deepseek gate_up: 56 KB
  EXPECT_EQ(0, cuda::streamer_staged_rows(5, 2048, false));
  EXPECT_EQ(2, cuda::streamer_staged_rows(2, 14336, false));  // mixtral down
  EXPECT_EQ(0, cuda::streamer_staged_rows(3, 14336, false));
  EXPECT_EQ(0, cuda::streamer_staged_rows(2, 2048, true));
  const cuda::StreamerLaunchShape mixtral_down = cuda::weight_streamer_launch_shape(4096, 14336, 1, 2, 1, 1, 1, 132);
  EXPECT_EQ(size_t(9216), mixtral_down.stage_bytes);
  EXPECT_EQ(size_t(28688), mixtral_down.staged_pitch);
  EXPECT_EQ(size_t(28688), mixtral_down.staged_bytes);
  EXPECT_EQ(7, mixtral_down.stages);
  // ... with the ring carrying the rows at T = 3: slots of weights and 3 rows.
  const cuda::StreamerLaunchShape mixtral_down_3 = cuda::weight_streamer_launch_shape(4096, 14336, 3, 2, 1, 1, 0, 132);
  EXPECT_EQ(cuda::weight_streamer_stage_bytes(1, 3), mixtral_down_3.stage_bytes);
  EXPECT_EQ(size_t(0), mixtral_down_3.staged_bytes);
  // A row of K = 2048 (4 KB) at T = 1 in 1000 CTAs: four per SM, 4 stages;
  // in 396 (or at T = 2), three per SM, 6 stages.
  EXPECT_EQ(4, cuda::weight_streamer_ctas_per_sm(9216, 4112, 1000, 1, 132));
  EXPECT_EQ(4, cuda::weight_streamer_stages(9216, 4112, 4));
  EXPECT_EQ(3, cuda::weight_streamer_ctas_per_sm(9216, 4112, 396, 1, 132));
  EXPECT_EQ(3, cuda::weight_streamer_ctas_per_sm(9216, 2 * 4112, 1000, 2, 132));
  EXPECT_EQ(6, cuda::weight_streamer_stages(9216, 4112, 3));
  for (int64_t kb = 1; kb <= 480; ++kb) {
    for (int64_t T = 1; T <= cuda::kStreamKernelMaxTokens; ++T)
      for (bool f32 : {false, true}) {
        const int64_t rows = cuda::streamer_staged_rows(T, kb * 64, f32);
        EXPECT_TRUE(rows == 0 || rows == T) << kb << " " << T;
        if (f32) EXPECT_LE(rows, 1);
        const size_t staged = size_t(rows) * cuda::weight_streamer_staged_pitch(kb);
        for (int64_t grid : {1, 1000}) {
          const int per_sm = cuda::weight_streamer_ctas_per_sm(9216, staged, grid, T, 132);
          const int s = cuda::weight_streamer_stages(9216, staged, per_sm);
          EXPECT_GE(s, per_sm == 4 ? 3 : 4) << kb << " " << T;
          EXPECT_LE(staged + size_t(s) * 9216, per_sm == 4   ? cuda::kStreamFourCtaBytes
                                               : per_sm == 3 ? cuda::kStreamSmallCtaBytes
                                                             : cuda::kStreamTwoCtaBytes)
              << kb << " " << T;
        }
      }
  }
}

// Four streamer CTAs share an SM at T = 1 where the row is staged whole and
// the grid has more than three per SM: deepseek gate_up (512 one-chunk
// CTAs, one wave of 4 x 132 instead of 1.29 of 3 x 132), 3 slots beside its
// 14 KB row. Three share an SM where the ring carries the rows (mixtral
// down at T = 4, 512 CTAs), from T = 2 with staged rows (qwen3 down at
// T = 4, 512 two-chunk CTAs: how many work depends on the routing), and
// where the grid has at most three per SM.
TEST(CudaHostPolicy, FourStreamerCtasPerSmAtOneTokenWithStagedRow) {
  const cuda::StreamerLaunchShape deepseek_gate_up =
      cuda::weight_streamer_launch_shape(4096, 7168, 1, 8, 1, 1, cuda::streamer_staged_rows(1, 7168, false), 132);
  EXPECT_EQ(512, deepseek_gate_up.ctas);
  EXPECT_EQ(4, deepseek_gate_up.ctas_per_sm);
  EXPECT_EQ(3, deepseek_gate_up.stages);
  EXPECT_LE(deepseek_gate_up.staged_bytes + 3 * deepseek_gate_up.stage_bytes, cuda::kStreamFourCtaBytes);
  const cuda::StreamerLaunchShape mixtral_down =
      cuda::weight_streamer_launch_shape(4096, 14336, 4, 2, 1, 1, cuda::streamer_staged_rows(4, 14336, false), 132);
  EXPECT_EQ(512, mixtral_down.ctas);
  EXPECT_EQ(size_t(0), mixtral_down.staged_bytes);
  EXPECT_EQ(3, mixtral_down.ctas_per_sm);
  const cuda::StreamerLaunchShape qwen3_down =
      cuda::weight_streamer_launch_shape(2048, 768, 4, 8, 2, 1, cuda::streamer_staged_rows(4, 768, false), 132);
  EXPECT_EQ(512, qwen3_down.ctas);
  EXPECT_EQ(size_t(4 * 1552), qwen3_down.staged_bytes);
  EXPECT_EQ(3, qwen3_down.ctas_per_sm);
  const cuda::StreamerLaunchShape gpt_oss_gate_up =  // 360 CTAs: at most three per SM
      cuda::weight_streamer_launch_shape(5760, 2880, 1, 4, 1, 1, cuda::streamer_staged_rows(1, 2880, false), 132);
  EXPECT_EQ(360, gpt_oss_gate_up.ctas);
  EXPECT_EQ(3, gpt_oss_gate_up.ctas_per_sm);
  EXPECT_EQ(2, cuda::weight_streamer_ctas_per_sm(9216, 4112, 264, 1, 132));
  // Holding the launch at three per SM leaves the chunk policy as it is
  // (deepseek down at T = 1: two chunks, since four per SM fit them).
  ASSERT_EQ(0, setenv("NVFP4MOE_STREAM_CTAS_PER_SM", "3", 1));
  EXPECT_EQ(3, cuda::weight_streamer_ctas_per_sm(9216, 14352, 512, 1, 132));
  EXPECT_TRUE(cuda::weight_streamer_four_per_sm(9216, 14352, 512, 1, 132));
  EXPECT_EQ(2, cuda::weight_streamer_chunks(false, 7168, 2048, 1, 8, 256, 1, 132));
  ASSERT_EQ(0, unsetenv("NVFP4MOE_STREAM_CTAS_PER_SM"));
}

// A ring slot is a stage's weights and one activation row per token (up to
// kStreamCtaRows, a CTA's row group) at a pitch of the stage's K and 16 bytes, in
// whole 128 bytes; a grid of more than two CTAs per SM gets as many slots as
// fit in kStreamSmallCtaBytes (three CTAs share an SM), a smaller one as
// many as fit in kStreamTwoCtaBytes, at most 8 and never fewer than 4.
TEST(CudaHostPolicy, WeightStreamerRingFitsItsBudget) {
  EXPECT_EQ(size_t(528), cuda::weight_streamer_x_pitch(1));  // 4 K blocks of BF16 + 16
  EXPECT_EQ(size_t(272), cuda::weight_streamer_x_pitch(2));  // 2 K blocks
  EXPECT_EQ(size_t(9216 + 640), cuda::weight_streamer_stage_bytes(1, 1));
  EXPECT_EQ(size_t(9216 + 8 * 528), cuda::weight_streamer_stage_bytes(1, 8));  // 13440: whole 128 B
  EXPECT_EQ(cuda::weight_streamer_stage_bytes(1, 8), cuda::weight_streamer_stage_bytes(1, 100));
  EXPECT_EQ(size_t(10112), cuda::weight_streamer_stage_bytes(2, 3));  // 9216 + 3 x 272 = 10032
  const auto stages = [](size_t slot, int64_t T, int64_t grid) {
    return cuda::weight_streamer_stages(slot, 0, cuda::weight_streamer_ctas_per_sm(slot, 0, grid, T, 132));
  };
  EXPECT_EQ(6, stages(cuda::weight_streamer_stage_bytes(1, 1), 1, 1000));
  EXPECT_EQ(8, stages(cuda::weight_streamer_stage_bytes(1, 1), 1, 264));
  EXPECT_EQ(4, stages(cuda::weight_streamer_stage_bytes(1, 8), 8, 1000));
  EXPECT_EQ(7, stages(cuda::weight_streamer_stage_bytes(1, 8), 8, 100));
  for (int32_t chunks : {1, 2})
    for (int64_t T = 1; T <= cuda::kStreamKernelMaxTokens; ++T)
      for (int64_t grid : {1, 264, 265, 10000}) {
        const size_t slot = cuda::weight_streamer_stage_bytes(chunks, T);
        const int s = stages(slot, T, grid);
        EXPECT_EQ(size_t(0), slot % 128);
        EXPECT_GE(slot, cuda::kStreamStageWeightBytes +
                            size_t(std::min<int64_t>(T, cuda::kStreamCtaRows)) * cuda::weight_streamer_x_pitch(chunks));
        EXPECT_GE(s, 4) << chunks << " chunks, T " << T;
        EXPECT_LE(s, 8);
        EXPECT_LE(size_t(s) * slot, grid > 264 ? cuda::kStreamSmallCtaBytes : cuda::kStreamTwoCtaBytes);
      }
}

// Two chunks per streamer CTA for SwiGLU and, with N in whole 128-row
// blocks, for K <= 1024 (qwen3 down, K = 768), from T = 2 where the
// two-chunk CTAs that can work (row blocks x min(E, T * k)) are two per SM
// (H200, 132 SMs: 264), and at T = 1 where they fit one wave of four per
// SM (528) and one-chunk CTAs do not, else one. The
// layer's down streamer
// overlaps gate_up with more CTAs than SMs, or where each
// CTA's slab fits its ring: gpt-oss down (2880 rows, k = 4) at T = 1 (180
// CTAs) and qwen3 down at T = 1 (128 CTAs of 55 KB) and T = 2 do; mixtral
// down at T = 1 (128 CTAs of 516 KB) does not, at T = 2 it does.
TEST(CudaHostPolicy, StreamerChunksAndOverlap) {
  const auto chunks = [](bool swiglu, int64_t n, int64_t k, int64_t T, int64_t top_k, int64_t E) {
    return cuda::weight_streamer_chunks(swiglu, n, k, T, top_k, E, cuda::choose_stream_splits(T, k), 132);
  };
  EXPECT_EQ(2, chunks(false, 2048, 768, 1, 8, 128));    // qwen3 down
  EXPECT_EQ(2, chunks(true, 1536, 2048, 1, 8, 128));    // qwen3 gate_up: gate/up row pairs
  EXPECT_EQ(1, chunks(false, 1536, 2048, 2, 8, 128));   // qwen3 gate_up without SwiGLU: 192 two-chunk CTAs
  EXPECT_EQ(2, chunks(false, 1536, 2048, 3, 8, 128));   // ... 288
  EXPECT_EQ(1, chunks(false, 1536, 2048, 3, 8, 21));    // ... at most 21 experts: 252
  EXPECT_EQ(2, chunks(false, 7168, 2048, 1, 8, 256));   // deepseek down, one token: 448 CTAs, four per SM
  EXPECT_EQ(1, chunks(false, 4096, 7168, 1, 8, 256));   // deepseek gate_up without SwiGLU: 512 one-chunk CTAs
  EXPECT_EQ(2, chunks(false, 28672, 4096, 1, 2, 8));    // mixtral gate_up without SwiGLU: 448 (896 in one chunk)
  EXPECT_EQ(1, chunks(false, 5760, 2880, 1, 4, 32));    // gpt-oss gate_up: 360 one-chunk CTAs
  EXPECT_EQ(1, chunks(false, 4096, 14336, 1, 2, 8));    // mixtral down: 128
  EXPECT_EQ(1, chunks(false, 14336, 4096, 1, 8, 64));   // 1792 one-chunk CTAs: 896 is still two waves
  EXPECT_EQ(2, chunks(false, 7168, 2048, 2, 8, 256));   // ... 896 two-chunk CTAs
  EXPECT_EQ(2, chunks(false, 5760, 2880, 2, 4, 32));    // gpt-oss gate_up: 360
  EXPECT_EQ(1, chunks(false, 2880, 2880, 8, 4, 32));    // gpt-oss down: N not in 128-row blocks
  EXPECT_EQ(1, chunks(false, 4096, 14336, 2, 2, 8));    // mixtral down: 128
  EXPECT_EQ(1, chunks(false, 4096, 14336, 3, 2, 8));    // ... 192
  EXPECT_EQ(1, chunks(false, 4096, 14336, 8, 2, 8));    // ... 8 experts at most: 256 (the grid: 512)
  EXPECT_EQ(2, chunks(false, 28672, 4096, 8, 2, 8));    // mixtral gate_up without SwiGLU: 1792
  EXPECT_EQ(1, chunks(false, 192, 128, 1, 8, 64));      // N not in 128-row blocks
  EXPECT_EQ(128, cuda::weight_streamer_ctas(2048, 2, 1, 8));
  EXPECT_EQ(96, cuda::weight_streamer_ctas(1536, 2, 1, 8));
  EXPECT_EQ(180, cuda::weight_streamer_ctas(2880, 1, 1, 4));
  // qwen3 down at T = 1: 128 CTAs of 12 K blocks, its row staged, slots of
  // 9 KB, 8 stages (74 KB of weights) for a 55 KB slab.
  const cuda::StreamerLaunchShape qwen3_down =
      cuda::weight_streamer_launch_shape(2048, 768, 1, 8, 2, 1, cuda::streamer_staged_rows(1, 768, false), 132);
  EXPECT_EQ(128, qwen3_down.ctas);
  EXPECT_EQ(12, qwen3_down.split_blocks);
  EXPECT_EQ(size_t(9216), qwen3_down.stage_bytes);
  EXPECT_EQ(size_t(1552), qwen3_down.staged_bytes);
  EXPECT_EQ(8, qwen3_down.stages);
  EXPECT_TRUE(cuda::streamer_overlap_pays(2048, 768, 1, 8, 128, 132));
  EXPECT_TRUE(cuda::streamer_overlap_pays(2048, 768, 2, 8, 128, 132));
  EXPECT_TRUE(cuda::streamer_overlap_pays(2880, 2880, 1, 4, 32, 132));
  EXPECT_FALSE(cuda::streamer_overlap_pays(4096, 14336, 1, 2, 8, 132));
  EXPECT_TRUE(cuda::streamer_overlap_pays(4096, 14336, 2, 2, 8, 132));
}

// The decode layer's slot rows: F32 storage up to 2^18 values (launch.hpp's
// measured cases on each side of the line).
TEST(CudaHostPolicy, DecodeSlotRowStorage) {
  EXPECT_TRUE(cuda::decode_slot_rows_in_f32(1 * 8, 2048));    // qwen3 T = 1
  EXPECT_TRUE(cuda::decode_slot_rows_in_f32(16 * 8, 2048));   // qwen3 T = 16: exactly on the line
  EXPECT_TRUE(cuda::decode_slot_rows_in_f32(16 * 4, 2880));   // gpt-oss T = 16
  EXPECT_TRUE(cuda::decode_slot_rows_in_f32(4 * 8, 7168));    // deepseek T = 4
  EXPECT_FALSE(cuda::decode_slot_rows_in_f32(8 * 8, 7168));   // deepseek T = 8
  EXPECT_FALSE(cuda::decode_slot_rows_in_f32(16 * 8, 2304));  // GpuMoeLayer.DecodeSlotRowsStoredAsBf16
}

// The compact grid's worked examples (launch.hpp), and the bound itself.
TEST(CudaHostPolicy, CompactGridIsOneShotUpToFiveWavesOfWideTilesTwoOfOthers) {
  const int32_t wide = cuda::kBlockTWide;
  const int64_t mixtral_down = cuda::compact_items_bound(512 * 2, 8, wide, 4096 / 256, 1);
  EXPECT_EQ(256, mixtral_down);
  EXPECT_EQ(256, cuda::compact_grid_ctas(mixtral_down, 132, wide));
  const int64_t mixtral_down_2048 = cuda::compact_items_bound(2048 * 2, 8, wide, 4096 / 256, 1);
  EXPECT_EQ(640, mixtral_down_2048);
  EXPECT_EQ(640, cuda::compact_grid_ctas(mixtral_down_2048, 132, wide));
  const int64_t qwen3_gate_up = cuda::compact_items_bound(2048 * 8, 128, wide, 1536 / 256, 1);
  EXPECT_EQ(1536, qwen3_gate_up);
  EXPECT_EQ(132, cuda::compact_grid_ctas(qwen3_gate_up, 132, wide));
  EXPECT_EQ(660, cuda::compact_grid_ctas(660, 132, wide));
  EXPECT_EQ(132, cuda::compact_grid_ctas(661, 132, wide));
  EXPECT_EQ(0, cuda::compact_grid_ctas(0, 132, wide));
  // gpt-oss down T = 16: 408 narrow items stay persistent.
  const int64_t gpt_oss_down = cuda::compact_items_bound(16 * 4, 32, cuda::kBlockTNarrow, (2880 + 255) / 256, 1);
  EXPECT_EQ(408, gpt_oss_down);
  EXPECT_EQ(132, cuda::compact_grid_ctas(gpt_oss_down, 132, cuda::kBlockTNarrow));
  for (const int32_t other : {cuda::kBlockTNarrow, cuda::kBlockTMedium}) {
    EXPECT_EQ(264, cuda::compact_grid_ctas(264, 132, other));
    EXPECT_EQ(132, cuda::compact_grid_ctas(265, 132, other));
  }
  // Fewer pairs than experts: at most one job per pair.
  EXPECT_EQ(3 * 2, cuda::compact_items_bound(3, 128, cuda::kBlockTNarrow, 2, 1));
  // The CPU plan (the device plan's mirror, DevicePlanEqualsCpuPlan) never
  // makes more jobs than the bound: uniform routings, and routings over a
  // random subset of the experts (many empty, the rest loaded).
  std::mt19937_64 rng(test_seed());
  for (int trial = 0; trial < 200; ++trial) {
    const int32_t block = trial % 2 ? cuda::kBlockTWide : cuda::kBlockTNarrow;
    const int64_t E = 1 + int64_t(rng() % 300), k = 1 + int64_t(rng() % std::min<int64_t>(E, 8));
    const int64_t T = 1 + int64_t(rng() % 3000), used = k + int64_t(rng() % (E - k + 1));
    std::vector<int32_t> ids = random_ids(rng, T, k, used);
    if (trial % 4 >= 2) ids = random_ids(rng, T, k, E);
    RoutingPlan plan;
    PlanOptions opt;
    opt.block_rows = block;
    ASSERT_TRUE(build_routing_plan(ids.data(), T, k, E, opt, &plan).ok());
    EXPECT_LE(int64_t(plan.jobs.size()), cuda::compact_items_bound(T * k, E, block, 1, 1))
        << "E=" << E << " T=" << T << " k=" << k << " experts used=" << used;
  }
}

// Which persistent grids take items from the tile queue: wide and broad
// tiles always; narrow tiles only for the light experts (their launch
// overlaps the wide one, whose CTAs free SMs up to a tile apart).
TEST(CudaHostPolicy, QueueForWideTilesAndLightExperts) {
  for (const cuda::ExpertClass c : {cuda::ExpertClass::kAll, cuda::ExpertClass::kRegular, cuda::ExpertClass::kLight})
    EXPECT_TRUE(cuda::takes_items_from_queue(cuda::kBlockTWide, c));
  for (const cuda::ExpertClass c : {cuda::ExpertClass::kAll, cuda::ExpertClass::kBroad})
    EXPECT_TRUE(cuda::takes_items_from_queue(cuda::kBlockTBroad, c));
  for (const int32_t other : {cuda::kBlockTNarrow, cuda::kBlockTMedium}) {
    EXPECT_FALSE(cuda::takes_items_from_queue(other, cuda::ExpertClass::kAll));
    EXPECT_FALSE(cuda::takes_items_from_queue(other, cuda::ExpertClass::kRegular));
  }
  EXPECT_TRUE(cuda::takes_items_from_queue(cuda::kBlockTNarrow, cuda::ExpertClass::kLight));
}

// The wide kernel's widths 64, 96 and 128 from more than 48 to 96 rows per
// expert on average: deepseek (k = 8, E = 256) at T = 2048, qwen3 (E = 128)
// at T = 1024 and gpt-oss (k = 4, E = 32) at T = 512 (64 rows each); not
// qwen3 at T = 2048 (128) or 512 (32), nor gpt-oss at T = 2048 (256).
// NVFP4MOE_WIDE_WIDTH_96 forces either set.
TEST(CudaHostPolicy, WideTileWidth96NearSixtyFourRowsPerExpert) {
  EXPECT_TRUE(cuda::wide_tile_width_96(2048 * 8, 256));
  EXPECT_TRUE(cuda::wide_tile_width_96(1024 * 8, 128));
  EXPECT_TRUE(cuda::wide_tile_width_96(512 * 4, 32));
  EXPECT_FALSE(cuda::wide_tile_width_96(2048 * 8, 128));
  EXPECT_FALSE(cuda::wide_tile_width_96(512 * 8, 128));
  EXPECT_FALSE(cuda::wide_tile_width_96(2048 * 4, 32));
  EXPECT_FALSE(cuda::wide_tile_width_96(48 * 10, 10));
  EXPECT_TRUE(cuda::wide_tile_width_96(48 * 10 + 1, 10));
  EXPECT_TRUE(cuda::wide_tile_width_96(96 * 10, 10));
  EXPECT_FALSE(cuda::wide_tile_width_96(96 * 10 + 1, 10));
  EXPECT_FALSE(cuda::wide_tile_width_96(100, 0));
  ASSERT_EQ(0, setenv("NVFP4MOE_WIDE_WIDTH_96", "1", 1));
  EXPECT_TRUE(cuda::wide_tile_width_96(2048 * 8, 128));
  ASSERT_EQ(0, setenv("NVFP4MOE_WIDE_WIDTH_96", "0", 1));
  EXPECT_FALSE(cuda::wide_tile_width_96(2048 * 8, 256));
  ASSERT_EQ(0, unsetenv("NVFP4MOE_WIDE_WIDTH_96"));
}

// Which epilogue kernel a GEMM launch takes (launch_sm90's kernel_for): the
// layer's gate_up (SwiGLU to BF16 h, no router weights) the SwiGLU rows
// path, MUL_MAT_ID to BF16 the BF16 rows path, everything else the F32 tile.
TEST(CudaHostPolicy, EpiloguePathFollowsOutputAndEpilogue) {
  cuda::GemmParams gate_up;
  gate_up.n = 2 * 768;
  gate_up.y_dtype = DType::kBF16;
  gate_up.epilogue = cuda::EpilogueKind::kSwiGLU;
  EXPECT_TRUE(cuda::swiglu_rows_epilogue(gate_up));
  EXPECT_FALSE(cuda::bf16_rows_epilogue(gate_up));
  cuda::GemmParams odd = gate_up;
  odd.n = 2 * 96;  // a warpgroup's (gate, up) pair would straddle N
  EXPECT_FALSE(cuda::swiglu_rows_epilogue(odd));
  cuda::GemmParams split = gate_up;
  split.k_splits = 2;
  EXPECT_FALSE(cuda::swiglu_rows_epilogue(split));
  cuda::GemmParams f32 = gate_up;
  f32.y_dtype = DType::kF32;
  EXPECT_FALSE(cuda::swiglu_rows_epilogue(f32));
  const float w = 1.0f;
  cuda::GemmParams routed = gate_up;
  routed.route_w = &w;
  EXPECT_FALSE(cuda::swiglu_rows_epilogue(routed));

  cuda::GemmParams store = gate_up;
  store.epilogue = cuda::EpilogueKind::kStore;
  EXPECT_TRUE(cuda::bf16_rows_epilogue(store));
  EXPECT_FALSE(cuda::swiglu_rows_epilogue(store));
  store.route_w = &w;  // the layer's down: F32 tile
  EXPECT_FALSE(cuda::bf16_rows_epilogue(store));
}

}  // namespace
}  // namespace nvfp4moe::testing
