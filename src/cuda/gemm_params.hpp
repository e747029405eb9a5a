// Parameters of the grouped NVFP4 GEMM, built on the host, read on the device.
// One struct instead of a long argument list; only tile shape and stage count
// are compile-time.
#pragma once

#include <cstdint>

#include "nvfp4moe/ops.hpp"
#include "nvfp4moe/plan.hpp"

namespace nvfp4moe::cuda {

struct PlanStatus;

#if defined(__CUDACC__)
#define NVFP4MOE_HOST_DEVICE __host__ __device__
#else
#define NVFP4MOE_HOST_DEVICE
#endif

// How compact row r (a position in the expert-sorted order) finds its
// activation row or output row.
enum class RowMap : int32_t {
  kToken = 0,    // sorted_src[r] / top_k   (x shared by the k slots)
  kPair = 1,     // sorted_src[r]           (x or y per (token, slot), ggml layout)
  kCompact = 2,  // r                       (intermediates kept in sorted order)
};

enum class EpilogueKind : int32_t {
  kStore = 0,   // y = alpha * acc [* route weight]
  kSwiGLU = 1,  // tile rows = (gate block, up block): y = act(alpha * g, alpha_up * u)
};

// Which experts a GEMM launch computes (GemmParams::light_max_rows,
// broad_rows; the plan's classes, plan.hpp).
enum class ExpertClass : int32_t {
  kAll = 0,
  kRegular = 1,  // the others: compact jobs [0, *broad_jobs_begin)
  kLight = 2,    // experts of 1 .. light_max_rows rows: jobs [*light_jobs_begin, *num_jobs)
  kBroad = 3,    // takes_broad_tiles(rows, block_rows, broad_rows): jobs [*broad_jobs_begin, *light_jobs_begin)
};

// The class of an expert of `rows` rows under a plan with classes: the
// plan's own test (build_routing_plan's mirror, build_plan_kernel).
NVFP4MOE_HOST_DEVICE inline ExpertClass expert_class_of(int32_t rows, int32_t light_max_rows, int32_t block_rows,
                                                        int32_t broad_rows) {
  if (rows > 0 && rows <= light_max_rows) return ExpertClass::kLight;
  return takes_broad_tiles(rows, block_rows, broad_rows) ? ExpertClass::kBroad : ExpertClass::kRegular;
}

// The compact schedule's work counter, kTileQueues per Context: one for a
// GEMM launch, and one for each launch of another class of experts that
// overlaps it. Zero between launches: the kernel that uses it rewinds it as
// its last CTA finishes.
struct TileQueue {
  int32_t next;   // the next item to hand out
  uint32_t done;  // CTAs that have taken their last item
};
inline constexpr int kTileQueues = 3;

struct GemmParams {
  // Weights in the sm90 packed layout, [E][n / 64][k / 64] chunks.
  const uint8_t* w_packed = nullptr;
  const float* alpha = nullptr;     // [E]; nullptr = 1
  const float* alpha_up = nullptr;  // [E]; second chunk of kSwiGLU tiles
  int32_t num_experts = 0, n = 0, k = 0;

  // Activations, BF16 rows (x_f32: one F32 row instead, which the weight
  // streamer rounds to BF16 as it stages it: streamer_stages_f32_row,
  // launch.hpp).
  const uint16_t* x = nullptr;
  const float* x_f32 = nullptr;
  int64_t x_stride = 0;  // elements between rows
  RowMap x_map = RowMap::kToken;

  // Plan (device).
  const int32_t* sorted_src = nullptr;
  int32_t top_k = 1;
  const ExpertJob* jobs = nullptr;
  const int32_t* num_jobs = nullptr;
  const int32_t* counts = nullptr;
  const int32_t* offsets = nullptr;
  Schedule schedule = Schedule::kCompact;
  TileQueue* queue = nullptr;         // compact only
  // Compact only: the grid has one CTA per possible item (compact_grid_ctas,
  // launch.hpp) and the CTAs take items by index, not from the queue.
  bool one_cta_per_item = false;
  int32_t rect_tiles_per_expert = 0;  // ceil(T / block_t): the worst case, known on the host
  // Classes of experts (choose_plan_options): with light_max_rows > 0 the
  // plan lists the light experts' jobs last, from *light_jobs_begin, and
  // with broad_rows > 0 the broad experts' before them, from
  // *broad_jobs_begin; launch_grouped_gemm runs the regular experts with
  // wide tiles, then the broad ones with broad tiles and the light ones with
  // narrow tiles, each launch filling the previous one's tail. It sets
  // expert_class for each launch. Compact only: rect plans without classes.
  // block_rows: the plan's (the regular experts' tile).
  int32_t block_rows = 0;
  int32_t light_max_rows = 0;
  int32_t broad_rows = 0;
  const int32_t* light_jobs_begin = nullptr;
  const int32_t* broad_jobs_begin = nullptr;
  ExpertClass expert_class = ExpertClass::kAll;

  // Output.
  void* y = nullptr;
  DType y_dtype = DType::kF32;
  // F32 rows whose values are rounded to BF16 first: BF16 rows' bits in F32's
  // layout (the layer's slot rows at decode sizes, moe_layer). store4 rounds;
  // epilogue_store sends such rows through it, not the F32 lane stores.
  bool y_round_to_bf16 = false;
  int64_t y_stride = 0;  // elements between output rows
  RowMap y_map = RowMap::kPair;
  const float* route_w = nullptr;  // [T*k] by pair index; nullptr = 1
  EpilogueKind epilogue = EpilogueKind::kStore;
  ActivationParams act;

  // Split K (narrow tiles only): k_splits > 1 writes raw FP32 partial sums to
  // partial [k_splits][T*k compact rows][n]; reduce_split_k then adds them in
  // split order and runs the epilogue. Deterministic, schedule-independent.
  int32_t k_splits = 1;
  float* partial = nullptr;
  int64_t sorted_rows = 0;  // T*k

  // Weight streamer (small T, no plan): it reads the ids itself, validates
  // them like the plan kernel and reports into the same status word.
  const int32_t* ids = nullptr;
  int32_t num_tokens = 0;
  PlanStatus* status = nullptr;
  // Its K split (choose_stream_splits, launch.hpp): with stream_splits > 1,
  // raw FP32 sums in stream_partial [splits][T*k pairs][n] and one counter
  // per (64 * chunks row block, pair) in stream_counters, zero between
  // launches. A streamer that overlaps another (LaunchOrder) uses its own.
  int32_t stream_splits = 1;
  float* stream_partial = nullptr;
  uint32_t* stream_counters = nullptr;

  // Programmatic dependent launch of the weight streamer and of the light
  // experts' GEMM (LaunchOrder, launch.hpp). The launcher sets
  // overlaps_previous when it launches the kernel to overlap the one before
  // it (which then waits for it); the caller sets next_overlaps when the
  // next kernel will overlap this one (which then lets it be scheduled).
  // Without them the kernel executes no griddepcontrol instruction: A/B at
  // d6178d2, a wait and a trigger in every launch cost 1-5% on MUL_MAT_ID at
  // T = 1, where nothing overlaps.
  bool overlaps_previous = false;
  bool next_overlaps = false;

  // Output tiles along N for a kernel whose tile covers 64 * chunks rows.
  NVFP4MOE_HOST_DEVICE int32_t n_tiles(int chunks) const { return (n + 64 * chunks - 1) / (64 * chunks); }
};

// The BF16 rows path (epilogue_store_bf16_rows, epilogue.cuh): kStore tiles
// to BF16 without router weights or split K.
NVFP4MOE_HOST_DEVICE inline bool bf16_rows_epilogue(const GemmParams& p) {
  return p.y_dtype == DType::kBF16 && p.epilogue == EpilogueKind::kStore && p.route_w == nullptr && p.k_splits == 1;
}

// The SwiGLU rows path: the layer's gate_up to its BF16 h, for tiles whose
// consumer warpgroups each hold a gate chunk and the up chunk of the same
// features (two chunks per consumer), so that SwiGLU runs on the
// accumulators in registers and only h goes through shared memory, as BF16
// rows. N % 128 == 0 keeps every warpgroup's (gate, up) pair inside N.
NVFP4MOE_HOST_DEVICE inline bool swiglu_rows_epilogue(const GemmParams& p) {
  return p.y_dtype == DType::kBF16 && p.epilogue == EpilogueKind::kSwiGLU && p.route_w == nullptr &&
         p.k_splits == 1 && p.n % 128 == 0;
}

// Which epilogue a GEMM kernel instance runs. One kernel per path: A/B at
// ba0a7ee, a runtime branch between two epilogues cost the path not taken 3%.
enum class EpiloguePath : int32_t {
  kF32Tile = 0,     // F32 tile per pass, epilogue_store: every case
  kBf16Rows = 1,    // bf16_rows_epilogue(p)
  kSwiGLURows = 2,  // swiglu_rows_epilogue(p), two chunks per consumer
};

#undef NVFP4MOE_HOST_DEVICE

}  // namespace nvfp4moe::cuda
