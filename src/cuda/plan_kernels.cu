// One CTA builds the whole plan. Each warp owns a contiguous range of pairs,
// so the order is fixed without atomics deciding anything:
//   1. per warp, per expert counts (__match_any_sync groups equal experts in
//      32 pairs; the group leader adds the group size to the warp's row);
//   2. a scan down each expert's column of warp counts (pairs of earlier
//      warps come first), then block scans over experts: offsets and jobs;
//   3. each warp walks its range again and places pair p at
//      offsets[e] + (earlier warps' e-pairs) + (its own earlier e-pairs).
// Tokens ascend within an expert because pair index t*k + j ascends. The
// result equals the CPU plan exactly. Ids are validated in pass 1; the first
// bad pair (lowest index) is reported and nothing else is written.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "cuda/check.hpp"
#include "cuda/launch.hpp"
#include "cuda/plan_kernels.cuh"
#include "cuda/scheduler.cuh"

namespace nvfp4moe::cuda {

__global__ void __launch_bounds__(kPlanThreads) build_plan_kernel(const int32_t* ids, int32_t num_tokens,
                                                                   int32_t top_k, int32_t num_experts,
                                                                   int32_t block_rows, bool stage_ids,
                                                                   DevicePlan plan) {
  constexpr int kWarps = kPlanThreads / 32;
  extern __shared__ int32_t smem[];
  int32_t* offsets = smem;                   // [E]
  int32_t* warp_rows = smem + num_experts;   // [kWarps][E]: counts, then prefixes, then running ranks
  int32_t* staged = smem + (kWarps + 1) * num_experts;  // [T*k] when stage_ids
  __shared__ int32_t bad_pair;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const uint32_t lanes_below = (1u << lane) - 1u;
  const int32_t pairs = num_tokens * top_k;
  // Warp ranges are whole multiples of 32 pairs.
  const int32_t span = ((pairs + kWarps - 1) / kWarps + 31) / 32 * 32;
  const int32_t first = min(pairs, warp * span), last = min(pairs, first + span);
  int32_t* my_rows = warp_rows + warp * num_experts;

  for (int i = tid; i < (kWarps + 1) * num_experts; i += kPlanThreads) smem[i] = 0;
  if (tid == 0) bad_pair = INT32_MAX;
  // Both passes read every id, some several times (the repeat check): one
  // coalesced copy into shared memory, loads all in flight, beats two
  // dependent walks over global memory.
  if (stage_ids) {
#pragma unroll 8
    for (int32_t i = tid; i < pairs; i += kPlanThreads) staged[i] = ids[i];
    ids = staged;
  }
  __syncthreads();

  // 1. Validate and count.
  for (int32_t base = first; base < last; base += 32) {
    const int32_t p = base + lane;
    int32_t e = -1;
    if (p < last) {
      e = ids[p];
      if (e < 0 || e >= num_experts) {
        atomicMin(&bad_pair, p);
        e = -1;
      } else {
        const int32_t row = p - p % top_k;
        for (int32_t q = row; q < p; ++q)
          if (ids[q] == e) atomicMin(&bad_pair, p);
      }
    }
    const uint32_t same = __match_any_sync(0xFFFFFFFFu, e);
    if (e >= 0 && (same & lanes_below) == 0) my_rows[e] += __popc(same);
    __syncwarp();
  }
  __syncthreads();
  if (bad_pair != INT32_MAX) {
    if (tid == 0) {
      const int32_t p = bad_pair, e = ids[p];
      *plan.status = {e < 0 || e >= num_experts ? kPlanIdOutOfRange : kPlanDuplicateId, p / top_k, p % top_k, e};
      *plan.num_jobs = 0;
      *plan.max_count = 0;
    }
    return;
  }

  // 2. Column scans (earlier warps first), then offsets and jobs over experts.
  using Scan = cub::BlockScan<int32_t, kPlanThreads>;
  using Reduce = cub::BlockReduce<int32_t, kPlanThreads>;
  __shared__ union {
    typename Scan::TempStorage scan;
    typename Reduce::TempStorage reduce;
  } temp;
  __shared__ int32_t carry_rows, carry_jobs;
  if (tid == 0) carry_rows = carry_jobs = 0;
  int32_t local_max = 0;
  for (int32_t e0 = 0; e0 < num_experts; e0 += kPlanThreads) {
    const int32_t e = e0 + tid;
    int32_t c = 0;
    if (e < num_experts) {
      for (int w = 0; w < kWarps; ++w) {
        const int32_t n = warp_rows[w * num_experts + e];
        warp_rows[w * num_experts + e] = c;
        c += n;
      }
    }
    const int32_t tiles = (c + block_rows - 1) / block_rows;
    local_max = max(local_max, c);
    int32_t row_off, job_off, rows_total, jobs_total;
    __syncthreads();
    Scan(temp.scan).ExclusiveSum(c, row_off, rows_total);
    __syncthreads();
    Scan(temp.scan).ExclusiveSum(tiles, job_off, jobs_total);
    row_off += carry_rows;
    job_off += carry_jobs;
    if (e < num_experts) {
      plan.counts[e] = c;
      plan.offsets[e] = row_off;
      offsets[e] = row_off;
      for (int32_t i = 0; i < tiles; ++i) {
        const int32_t rows = min(block_rows, c - i * block_rows);
        plan.jobs[job_off + i] = {e, row_off + i * block_rows, rows, tile_rows_for(rows, block_rows)};
      }
    }
    __syncthreads();
    if (tid == 0) {
      carry_rows += rows_total;
      carry_jobs += jobs_total;
    }
  }
  __syncthreads();
  const int32_t max_count = Reduce(temp.reduce).Reduce(local_max, [](int32_t a, int32_t b) { return a > b ? a : b; });
  if (tid == 0) {
    plan.offsets[num_experts] = carry_rows;
    *plan.num_jobs = carry_jobs;
    *plan.max_count = max_count;
    *plan.status = {kPlanOk, 0, 0, 0};
  }

  // 3. Stable scatter, each warp over its own range again.
  for (int32_t base = first; base < last; base += 32) {
    const int32_t p = base + lane;
    const int32_t e = p < last ? ids[p] : -1;
    const uint32_t same = __match_any_sync(0xFFFFFFFFu, e);
    if (e >= 0) {
      const int32_t r = offsets[e] + my_rows[e] + __popc(same & lanes_below);
      plan.sorted_src[r] = p;
      plan.inverse[p] = r;
    }
    __syncwarp();
    if (e >= 0 && (same & lanes_below) == 0) my_rows[e] += __popc(same);
    __syncwarp();
  }
}

Status launch_build_plan(const int32_t* ids, int64_t num_tokens, int64_t top_k, int64_t num_experts,
                         int32_t block_rows, const DevicePlan& plan, cudaStream_t stream) {
  size_t smem = plan_smem_bytes(num_experts);
  const size_t staged_bytes = sizeof(int32_t) * size_t(num_tokens * top_k);
  const bool stage_ids = smem + staged_bytes <= kPlanMaxSmemBytes;
  if (stage_ids) smem += staged_bytes;
  NVFP4MOE_CUDA_TRY(cudaFuncSetAttribute(build_plan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         int(kPlanMaxSmemBytes)));
  build_plan_kernel<<<1, kPlanThreads, smem, stream>>>(ids, int32_t(num_tokens), int32_t(top_k),
                                                       int32_t(num_experts), block_rows, stage_ids, plan);
  NVFP4MOE_CUDA_CHECK_LAUNCH("build_plan_kernel");
  return ok_status();
}

}  // namespace nvfp4moe::cuda
