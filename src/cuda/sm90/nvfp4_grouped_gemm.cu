// Instances and launcher of the sm90 grouped GEMM. The one dispatch point
// from a runtime token-tile height to a compiled kernel.
#include <algorithm>
#include <cstdlib>

#include "cuda/check.hpp"
#include "cuda/launch.hpp"
#include "cuda/sm90/nvfp4_grouped_gemm.cuh"

namespace nvfp4moe::cuda {
namespace {

// NVFP4MOE_F32_EPILOGUE=1 sends every tile through the F32 path (the tests
// that the row epilogues give that path's bits).
bool f32_epilogue_forced() {
  const char* env = std::getenv("NVFP4MOE_F32_EPILOGUE");
  return env && env[0] == '1';
}

// The kernel instance for p's epilogue path; the SwiGLU rows path needs two
// chunks per consumer (the wide tile).
template <int kBlockT, bool kWidth96, bool kTakeFromQueue>
auto kernel_for_path(const GemmParams& p) {
  using sm90::nvfp4_grouped_gemm_kernel;
  if (f32_epilogue_forced())
    return nvfp4_grouped_gemm_kernel<kBlockT, EpiloguePath::kF32Tile, kWidth96, kTakeFromQueue>;
  if constexpr (sm90::TileConfig<kBlockT>::kBlocks == 2) {
    if (swiglu_rows_epilogue(p))
      return nvfp4_grouped_gemm_kernel<kBlockT, EpiloguePath::kSwiGLURows, kWidth96, kTakeFromQueue>;
  }
  return bf16_rows_epilogue(p) ? nvfp4_grouped_gemm_kernel<kBlockT, EpiloguePath::kBf16Rows, kWidth96, kTakeFromQueue>
                               : nvfp4_grouped_gemm_kernel<kBlockT, EpiloguePath::kF32Tile, kWidth96, kTakeFromQueue>;
}

// The instances takes_items_from_queue (launch.hpp) can ask for: wide tiles
// with the queue, at either set of widths (wide_tile_width_96), broad ones
// with the queue, narrow ones with and without, medium ones without; nullptr
// for any other.
using GemmKernel = void (*)(GemmParams);
template <int kBlockT>
GemmKernel kernel_for(const GemmParams& p, bool take_from_queue) {
  if constexpr (kBlockT == kBlockTWide) {
    if (!take_from_queue) return nullptr;
    return wide_tile_width_96(p.sorted_rows, p.num_experts) ? kernel_for_path<kBlockT, true, true>(p)
                                                            : kernel_for_path<kBlockT, false, true>(p);
  } else if constexpr (kBlockT == kBlockTBroad) {
    return take_from_queue ? kernel_for_path<kBlockT, false, true>(p) : nullptr;
  } else if constexpr (kBlockT == kBlockTNarrow) {
    return take_from_queue ? kernel_for_path<kBlockT, false, true>(p) : kernel_for_path<kBlockT, false, false>(p);
  } else {
    return take_from_queue ? nullptr : kernel_for_path<kBlockT, false, false>(p);
  }
}

// launched: whether a grid was launched (an empty bound launches none).
template <int kBlockT>
Status launch_sm90(const GemmParams& p, int num_sms, cudaStream_t stream, LaunchOrder order,
                   bool* launched = nullptr) {
  if (launched) *launched = false;
  auto kernel = kernel_for<kBlockT>(p, takes_items_from_queue(kBlockT, p.expert_class));
  if (!kernel)
    return make_status(StatusCode::kInternal, "no grouped GEMM instance for ", kBlockT, "-token tiles of expert class ",
                       int(p.expert_class));
  constexpr size_t smem = sm90::smem_bytes<kBlockT>();
  constexpr int kChunks = sm90::TileConfig<kBlockT>::kChunks;
  NVFP4MOE_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  GemmParams q = p;
  int64_t grid;
  if (p.schedule == Schedule::kRect) {
    grid = int64_t(p.num_experts) * p.rect_tiles_per_expert * p.n_tiles(kChunks) * p.k_splits;
  } else {
    const int64_t items = compact_class_jobs_bound(p.sorted_rows, p.num_experts, kBlockT, p.expert_class,
                                                   p.light_max_rows, p.block_rows) *
                          p.n_tiles(kChunks) * p.k_splits;
    grid = compact_grid_ctas(items, num_sms, kBlockT);
    // Experiments only (perf.md Next item 11): the light launch on fewer
    // CTAs, to measure its per-CTA stream rate. Its CTAs take items from the
    // queue, so any grid covers every item with the same bits.
    if (p.expert_class == ExpertClass::kLight)
      if (const int64_t cap = forced_count("NVFP4MOE_LIGHT_GRID")) grid = std::min(grid, cap);
    q.one_cta_per_item = grid == items;
  }
  if (grid <= 0) return ok_status();
  if (grid > INT32_MAX)
    return make_status(StatusCode::kOutOfRange, "rect schedule grid of ", grid, " CTAs exceeds the launch limit");
  q.overlaps_previous = order == LaunchOrder::kOverlapPrevious;
  NVFP4MOE_CUDA_TRY(launch_kernel(kernel, dim3(uint32_t(grid)), dim3(sm90::threads<kBlockT>()), smem, stream,
                                  order, q));
  NVFP4MOE_CUDA_CHECK_LAUNCH("nvfp4_grouped_gemm_kernel");
  if (launched) *launched = true;
  if (q.k_splits > 1) return launch_reduce_split_k(q, num_sms, stream);
  return ok_status();
}

// The classes of experts (GemmParams::light_max_rows, broad_rows): the
// regular experts with wide tiles, then the broad ones with broad tiles,
// then the light ones with narrow tiles, each launch scheduled to start on
// the SMs the previous one's tail frees (its CTAs let it be scheduled at
// once; it writes other rows) and each with its own queue counter, since the
// launch before may still be taking items. Compact only (rect runs one
// grid at the plan's tile: choose_plan_options(schedule, ...), ops.cu); no
// K split, so the class a job falls in does not change its bits (every tile
// sums a job's K blocks in the same order, whatever its width).
Status launch_expert_classes(const GemmParams& p, int32_t block_t, int num_sms, cudaStream_t stream) {
  const bool broad = p.broad_rows > 0, light = p.light_max_rows > 0;
  if (block_t != kBlockTWide || p.block_rows != kBlockTWide || (light && p.light_max_rows != kBlockTNarrow) ||
      (broad && p.broad_rows != kBlockTBroad) || p.k_splits != 1 || !p.light_jobs_begin || !p.broad_jobs_begin ||
      p.schedule != Schedule::kCompact)
    return make_status(StatusCode::kInternal,
                       "classes of experts need the compact schedule and wide, broad and narrow tiles of the plan's "
                       "rows without a K split");
  LaunchOrder order = LaunchOrder::kAfterPrevious;
  bool launched = false;
  GemmParams regular = p;
  regular.expert_class = ExpertClass::kRegular;
  regular.next_overlaps = true;
  NVFP4MOE_RETURN_IF_ERROR(launch_sm90<kBlockTWide>(regular, num_sms, stream, order, &launched));
  if (launched) order = LaunchOrder::kOverlapPrevious;
  if (broad) {
    GemmParams b = p;
    b.expert_class = ExpertClass::kBroad;
    b.queue = p.queue ? p.queue + 1 : nullptr;
    b.next_overlaps = light;
    NVFP4MOE_RETURN_IF_ERROR(launch_sm90<kBlockTBroad>(b, num_sms, stream, order, &launched));
    if (launched) order = LaunchOrder::kOverlapPrevious;
  }
  if (!light) return ok_status();
  GemmParams l = p;
  l.expert_class = ExpertClass::kLight;
  l.queue = p.queue ? p.queue + 2 : nullptr;
  return launch_sm90<kBlockTNarrow>(l, num_sms, stream, order);
}

}  // namespace

int32_t choose_k_splits(int64_t num_tokens, int64_t top_k, int64_t num_experts, int64_t n, int64_t k,
                        int32_t block_t, int num_sms) {
  const int64_t k_blocks = k / 64;
  if (const int64_t forced = forced_count("NVFP4MOE_K_SPLITS"))  // experiments only, any tile
    return splits_without_empty(k_blocks, std::min(forced, k_blocks));
  if (block_t != kBlockTNarrow) return 1;
  constexpr int kChunks = sm90::TileConfig<kBlockTNarrow>::kChunks;
  // Each split pays a tile set-up, an epilogue and a partial write, so split
  // only when most SMs would idle, into long pieces (H200: 6 splits of 5-6
  // K blocks ran qwen3 gate_up at T=1 in 31 us, against 21 us for the
  // earlier unsplit 128-row tiles).
  constexpr int64_t kMinBlocksPerSplit = 8;
  const int64_t jobs = std::min(num_experts, num_tokens * top_k);  // at most one narrow job per routed row
  const int64_t items = jobs * ((n + 64 * kChunks - 1) / (64 * kChunks));
  if (2 * items >= num_sms) return 1;
  const int64_t splits = std::min((int64_t(num_sms) + items - 1) / std::max<int64_t>(items, 1),
                                  std::max<int64_t>(k_blocks / kMinBlocksPerSplit, 1));
  return splits_without_empty(k_blocks, std::max<int64_t>(splits, 1));
}

Status launch_grouped_gemm(const GemmParams& p, int32_t block_t, int num_sms, cudaStream_t stream) {
  if (p.light_max_rows > 0 || p.broad_rows > 0) return launch_expert_classes(p, block_t, num_sms, stream);
  switch (block_t) {
    case 32: return launch_sm90<32>(p, num_sms, stream, LaunchOrder::kAfterPrevious);
    case 64: return launch_sm90<64>(p, num_sms, stream, LaunchOrder::kAfterPrevious);
    case 128: return launch_sm90<128>(p, num_sms, stream, LaunchOrder::kAfterPrevious);
    case kBlockTBroad: return launch_sm90<kBlockTBroad>(p, num_sms, stream, LaunchOrder::kAfterPrevious);
    default: return make_status(StatusCode::kInternal, "no grouped GEMM instance for a token tile of ", block_t);
  }
}

}  // namespace nvfp4moe::cuda
