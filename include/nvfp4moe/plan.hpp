// Routing plan: from top-k expert ids to the compact worklist.
//
// ids [T][k] (int32) assign each (token t, slot j) pair to an expert. The plan
// groups the T*k pairs by expert:
//   counts[e]   pairs routed to expert e
//   offsets[e]  exclusive scan of counts (offsets[E] = T*k)
//   sorted_src  compact row r -> pair index t*k + j; stable, so within one
//               expert the tokens ascend (and for one token, the slots)
//   inverse     pair index t*k + j -> compact row r
//   jobs        ExpertJob tiles over the compact rows: each covers at most
//               block_rows consecutive rows of one expert. Only real work is
//               listed; an expert with no rows has no job.
// This CPU builder is the mirror the CUDA plan kernels are tested against
// (bit-for-bit equal output). [TAG_WORKLIST_FORMAT]
#pragma once

#include <cstdint>
#include <vector>

#include "nvfp4moe/status.hpp"

namespace nvfp4moe {

// One tile of the compact schedule. 16 bytes; the same struct is used on the
// device. [TAG_WORKLIST_FORMAT]
struct ExpertJob {
  int32_t expert;
  int32_t row_begin;  // first compact row (index into sorted_src)
  int32_t num_rows;   // 1 .. block_rows
  int32_t tile_rows;  // tile height chosen for this job (block_rows policy)
};
static_assert(sizeof(ExpertJob) == 16, "ExpertJob is 4 int32 fields; device code relies on it");

struct PlanOptions {
  int32_t block_rows = 128;  // maximum rows of one job (the mainloop's token tile)
};

struct RoutingPlan {
  int32_t num_tokens = 0;   // T
  int32_t top_k = 0;        // k
  int32_t num_experts = 0;  // E
  int32_t block_rows = 0;
  std::vector<int32_t> counts;      // [E]
  std::vector<int32_t> offsets;     // [E + 1]
  std::vector<int32_t> sorted_src;  // [T*k]
  std::vector<int32_t> inverse;     // [T*k]
  std::vector<ExpertJob> jobs;      // compact worklist
  int32_t max_count = 0;            // largest counts[e]
};

// Validates ids: every id in [0, E), no expert twice within one token's
// slots (top-k routing never repeats; a repeat means an upstream bug), T >= 0,
// 1 <= k <= E. The error names the first bad (t, j) and its value.
Status validate_ids(const int32_t* ids, int64_t num_tokens, int64_t top_k, int64_t num_experts);

Status build_routing_plan(const int32_t* ids, int64_t num_tokens, int64_t top_k, int64_t num_experts,
                          const PlanOptions& opt, RoutingPlan* out);

// The rectangular enumeration kept for comparison: every expert times
// ceil(max_count / block_rows) tiles, empty ones included (num_rows may be 0).
std::vector<ExpertJob> rect_jobs(const RoutingPlan& plan);

}  // namespace nvfp4moe
