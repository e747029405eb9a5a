// Device routing plan: the GPU mirror of src/plan/plan.cpp. Same definitions,
// bit-identical output (tests/gpu compares them). [TAG_WORKLIST_FORMAT]
#pragma once

#include <algorithm>
#include <cstdint>

#include "nvfp4moe/plan.hpp"

namespace nvfp4moe::cuda {

// Where the plan kernel reports bad ids. code 0 = fine.
struct PlanStatus {
  int32_t code;   // PlanError
  int32_t token;  // first offending (token, slot)
  int32_t slot;
  int32_t value;  // the id
};
enum PlanError : int32_t { kPlanOk = 0, kPlanIdOutOfRange = 1, kPlanDuplicateId = 2 };

// The plan kernel's grid barrier. Zeroed once when allocated; every launch
// leaves `arrived` at 0 again and advances `generation`, so no host memset is
// needed between launches (or graph replays).
struct GridBarrier {
  uint32_t arrived;
  uint32_t generation;
};

struct DevicePlan {
  int32_t* counts;      // [E]
  int32_t* offsets;     // [E + 1]
  int32_t* sorted_src;  // [T*k]
  int32_t* inverse;     // [T*k]
  ExpertJob* jobs;      // [max_jobs(T*k, E, block_rows)]
  int32_t* num_jobs;    // [1]
  int32_t* max_count;   // [1]
  PlanStatus* status;   // [1]
  // Scratch the CTAs of one build exchange through (not part of the plan).
  GridBarrier* barrier;
  int32_t* cta_first_bad;  // [max_ctas]: lowest bad pair index of each CTA's range, INT32_MAX if none
  int32_t* cta_counts;     // [max_ctas][plan_counts_stride(E)]: pairs per expert in each CTA's range
  int32_t max_ctas;
};

inline int64_t max_jobs(int64_t pairs, int64_t num_experts, int64_t block_rows) {
  return pairs / block_rows + num_experts;
}

inline constexpr int kPlanThreads = 1024;
inline constexpr int kPlanWarps = kPlanThreads / 32;
// Chunks of 32 pairs a warp keeps in registers from counting to scattering;
// a warp with a longer range reads its ids a second time.
inline constexpr int kPlanHeldChunks = 4;
// Grid size policy. Up to kPlanSingleCtaPairs (4 chunks per warp, all held in
// registers) one CTA is faster: a second CTA costs a grid barrier (an L2
// round trip for the arrival and one for the release, ~1-2 us) while a chunk
// costs a warp ~0.1-0.2 us per pass. Above it, one chunk per warp per CTA
// (kPlanPairsPerCta), up to one CTA per SM: the per-chunk work is issue
// bound, so it is spread as wide as the barrier allows. Worked example,
// T = 2048, k = 8: 16384 pairs -> 16 CTAs.
inline constexpr int64_t kPlanSingleCtaPairs = int64_t(kPlanHeldChunks) * 32 * kPlanWarps;
inline constexpr int64_t kPlanPairsPerCta = 32 * kPlanWarps;

inline int plan_grid_ctas(int64_t pairs, int max_ctas) {
  if (pairs <= kPlanSingleCtaPairs || max_ctas <= 1) return 1;
  return int(std::min<int64_t>(max_ctas, (pairs + kPlanPairsPerCta - 1) / kPlanPairsPerCta));
}

// Row stride of cta_counts: a multiple of 4 so that rows are read as int4.
__host__ __device__ inline int64_t plan_counts_stride(int64_t num_experts) { return (num_experts + 3) / 4 * 4; }

// Dynamic shared memory of one CTA: per expert, one cursor per warp (padded
// to kPlanWarps + 1 so the warps' columns fall in different banks), then the
// expert's count, this CTA's first row, its offset and its first job.
inline constexpr int kPlanCursorStride = kPlanWarps + 1;
inline size_t plan_smem_bytes(int64_t num_experts) {
  return sizeof(int32_t) * (size_t(num_experts) * (kPlanCursorStride + 4) + 1);
}

__global__ void build_plan_kernel(const int32_t* ids, int32_t num_tokens, int32_t top_k, int32_t num_experts,
                                  int32_t block_rows, DevicePlan plan);

}  // namespace nvfp4moe::cuda
