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
// adds exactly kGridBarrierSpan to `arrived` (CTA 0 adds the span less the
// other CTAs' ones), so a launch finds it at a multiple of the span until all
// its CTAs have arrived, and no host memset is needed between launches (or
// graph replays). The span divides 2^32, so the count may wrap.
inline constexpr uint32_t kGridBarrierSpan = 1024;  // >= the plan's CTAs (plan_grid_ctas)
struct GridBarrier {
  uint32_t arrived;
  uint32_t unused;  // the old barrier's generation; the first-bad words follow the struct
};

struct DevicePlan {
  int32_t* counts;      // [E]
  int32_t* offsets;     // [E + 1]
  int32_t* sorted_src;  // [T*k]
  int32_t* inverse;     // [T*k]
  ExpertJob* jobs;      // [max_jobs(T*k, E, block_rows)]
  int32_t* num_jobs;    // [1]
  int32_t* light_jobs_begin;  // [1] RoutingPlan::light_jobs_begin
  int32_t* broad_jobs_begin;  // [1] RoutingPlan::broad_jobs_begin
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
static_assert(kGridBarrierSpan >= uint32_t(kPlanThreads), "plan_grid_ctas allows up to kPlanThreads CTAs");
// Grid size policy, from a sweep on an H200 (one plan per CUDA graph, E =
// 128, k = 8; an empty kernel measures 3.0 us this way, and this kernel's
// fixed cost, barrier and exchange of counts included, is most of the rest).
// Up to kPlanSingleCtaPairs one CTA is as fast (2048 pairs: 10.4 us alone,
// 10.2 us on 8 CTAs; 512 pairs: 8.0 us alone, 10.1 us on 4). Above it, one
// CTA per kPlanPairsPerCta pairs: the phases are latency bound, so wider is
// faster until the exchange grows (16384 pairs: 11.4 us on 16 CTAs, 10.7 us
// on 32 and on 64). At most one CTA per SM, and kPlanMaxExchangeInts / E,
// since every CTA reads all CTAs' counts (E = 1024, 65536 pairs: 20.7 us on
// 16, 17.5 us on 32, 17.3 us on 64, 20.2 us on 132). Worked example, T =
// 2048, k = 8, E = 128: 16384 pairs -> 32 CTAs.
inline constexpr int64_t kPlanSingleCtaPairs = 2048;
inline constexpr int64_t kPlanPairsPerCta = 512;
inline constexpr int64_t kPlanMaxExchangeInts = 32768;

inline int plan_grid_ctas(int64_t pairs, int64_t num_experts, int max_ctas) {
  if (pairs <= kPlanSingleCtaPairs || max_ctas <= 1) return 1;
  const int64_t by_pairs = (pairs + kPlanPairsPerCta - 1) / kPlanPairsPerCta;
  const int64_t by_exchange = std::max<int64_t>(2, kPlanMaxExchangeInts / std::max<int64_t>(num_experts, 1));
  // kPlanThreads: one thread per CTA reads that CTA's first bad pair.
  return int(std::min<int64_t>({by_pairs, by_exchange, int64_t(max_ctas), kPlanThreads}));
}

// The smallest b with 2^b >= n (0 for n <= 1): the bits of the largest of n ids.
inline int ceil_log2(int64_t n) {
  int bits = 0;
  while ((int64_t(1) << bits) < n) ++bits;
  return bits;
}

// Row stride of cta_counts: a power of two of at least 4, so that rows are
// read as int4 and a thread finds its int4 by shifts.
inline int plan_counts_quad_bits(int64_t num_experts) { return std::max(ceil_log2(num_experts) - 2, 0); }
inline int64_t plan_counts_stride(int64_t num_experts) { return int64_t(4) << plan_counts_quad_bits(num_experts); }

// Where each CTA and warp starts, computed on the host so that the kernel
// divides only once (a division is ~20 instructions, which every warp of
// every CTA would issue: see build_plan_kernel's NOTES).
struct PlanGeometry {
  uint32_t cta_chunks;   // 32-pair chunks per CTA (the last CTA may have fewer)
  uint32_t warp_chunks;  // per warp of a CTA
  int32_t slot_step;     // 32 % top_k: how far a lane's slot moves per chunk
  int32_t key_bits;      // bits of the largest expert id
  int32_t quad_bits;     // log2 of the int4 quads per cta_counts row (plan_counts_stride)
};

inline PlanGeometry plan_geometry(int64_t pairs, int64_t top_k, int64_t num_experts, int ctas) {
  const uint32_t chunks = uint32_t((pairs + 31) / 32);
  PlanGeometry g;
  g.cta_chunks = (chunks + uint32_t(ctas) - 1) / uint32_t(ctas);
  g.warp_chunks = (g.cta_chunks + kPlanWarps - 1) / kPlanWarps;
  g.slot_step = int32_t(32 % top_k);
  g.key_bits = ceil_log2(num_experts);
  g.quad_bits = plan_counts_quad_bits(num_experts);
  return g;
}

// Dynamic shared memory of one CTA: per expert, one cursor per warp (padded
// to kPlanWarps + 1 so the warps' columns fall in different banks), then the
// expert's count, this CTA's first row, its offset, its first regular and
// first broad job, and the light experts in order.
inline constexpr int kPlanCursorStride = kPlanWarps + 1;
inline size_t plan_smem_bytes(int64_t num_experts) {
  return sizeof(int32_t) * (size_t(num_experts) * (kPlanCursorStride + 6) + 2);
}

__global__ void build_plan_kernel(const int32_t* ids, int32_t num_tokens, int32_t top_k, int32_t num_experts,
                                  int32_t block_rows, int32_t light_max_rows, int32_t broad_rows,
                                  PlanGeometry geometry, DevicePlan plan, bool next_overlaps);

}  // namespace nvfp4moe::cuda
