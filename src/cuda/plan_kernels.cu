// One CTA builds the whole plan: counting, two block scans (rows, then jobs),
// then a stable scatter. Stability comes from walking the pairs in index
// order, 1024 at a time: within a warp, __match_any_sync ranks equal experts
// by lane; across warps, per-warp counts in shared memory add the earlier
// warps; across rounds, a running base per expert. No atomics decide an
// order, so the result is deterministic and equals the CPU plan exactly.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "cuda/check.hpp"
#include "cuda/launch.hpp"
#include "cuda/plan_kernels.cuh"
#include "cuda/scheduler.cuh"

namespace nvfp4moe::cuda {

__global__ void __launch_bounds__(kPlanThreads) build_plan_kernel(const int32_t* ids, int32_t num_tokens,
                                                                   int32_t top_k, int32_t num_experts,
                                                                   int32_t block_rows, DevicePlan plan) {
  extern __shared__ int32_t smem[];
  int32_t* count = smem;                     // [E]
  int32_t* base = smem + num_experts;        // [E]
  int32_t* warp_count = smem + 2 * num_experts;  // [32][E]
  __shared__ int32_t bad_pair;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int32_t pairs = num_tokens * top_k;

  for (int i = tid; i < 34 * num_experts; i += kPlanThreads) smem[i] = 0;
  if (tid == 0) {
    bad_pair = INT32_MAX;
  }
  __syncthreads();

  // Count, and find the first bad pair (lowest index wins, as on the CPU).
  for (int32_t p = tid; p < pairs; p += kPlanThreads) {
    const int32_t e = ids[p];
    if (e < 0 || e >= num_experts) {
      atomicMin(&bad_pair, p);
    } else {
      atomicAdd(&count[e], 1);
      const int32_t t = p / top_k, j = p % top_k;
      for (int32_t j2 = 0; j2 < j; ++j2)
        if (ids[t * top_k + j2] == e) atomicMin(&bad_pair, p);
    }
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

  // Offsets and job offsets: one block scan each over experts (E <= 1024
  // after the host check; experts beyond the block are walked in chunks).
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
    const int32_t c = e < num_experts ? count[e] : 0;
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
      base[e] = row_off;
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
  __syncthreads();

  // Stable scatter.
  const uint32_t lanes_below = (1u << lane) - 1u;
  for (int32_t round = 0; round * kPlanThreads < pairs; ++round) {
    const int32_t p = round * kPlanThreads + tid;
    const bool valid = p < pairs;
    const int32_t e = valid ? ids[p] : -1;
    const uint32_t same = __match_any_sync(0xFFFFFFFFu, e);
    const int32_t rank_in_warp = __popc(same & lanes_below);
    const bool leader = rank_in_warp == 0;
    if (valid && leader) warp_count[warp * num_experts + e] = __popc(same);
    __syncthreads();
    if (valid) {
      int32_t r = base[e] + rank_in_warp;
      for (int w = 0; w < warp; ++w) r += warp_count[w * num_experts + e];
      plan.sorted_src[r] = p;
      plan.inverse[p] = r;
    }
    __syncthreads();
    if (valid && leader) {
      atomicAdd(&base[e], __popc(same));  // order-free: a sum
      warp_count[warp * num_experts + e] = 0;
    }
    __syncthreads();
  }
}

Status launch_build_plan(const int32_t* ids, int64_t num_tokens, int64_t top_k, int64_t num_experts,
                         int32_t block_rows, const DevicePlan& plan, cudaStream_t stream) {
  const size_t smem = plan_smem_bytes(num_experts);
  NVFP4MOE_CUDA_TRY(cudaFuncSetAttribute(build_plan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  build_plan_kernel<<<1, kPlanThreads, smem, stream>>>(ids, int32_t(num_tokens), int32_t(top_k),
                                                       int32_t(num_experts), block_rows, plan);
  NVFP4MOE_CUDA_CHECK_LAUNCH("build_plan_kernel");
  return ok_status();
}

}  // namespace nvfp4moe::cuda
