// Device routing plan: the GPU mirror of src/plan/plan.cpp. Same definitions,
// bit-identical output (tests/gpu compares them). [TAG_WORKLIST_FORMAT]
#pragma once

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

struct DevicePlan {
  int32_t* counts;      // [E]
  int32_t* offsets;     // [E + 1]
  int32_t* sorted_src;  // [T*k]
  int32_t* inverse;     // [T*k]
  ExpertJob* jobs;      // [max_jobs(T*k, E, block_rows)]
  int32_t* num_jobs;    // [1]
  int32_t* max_count;   // [1]
  PlanStatus* status;   // [1]
};

inline int64_t max_jobs(int64_t pairs, int64_t num_experts, int64_t block_rows) {
  return pairs / block_rows + num_experts;
}

// One CTA of kPlanThreads; dynamic shared memory plan_smem_bytes(E).
inline constexpr int kPlanThreads = 1024;
inline size_t plan_smem_bytes(int64_t num_experts) { return sizeof(int32_t) * (kPlanThreads / 32 + 1) * num_experts; }
// The ids are staged in shared memory when they fit beside the counters
// (T*k up to ~48K pairs at E = 128).
inline constexpr size_t kPlanMaxSmemBytes = 200 * 1024;

__global__ void build_plan_kernel(const int32_t* ids, int32_t num_tokens, int32_t top_k, int32_t num_experts,
                                  int32_t block_rows, bool stage_ids, DevicePlan plan);

}  // namespace nvfp4moe::cuda
