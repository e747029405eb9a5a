// The plan is built by a grid of CTAs (one for small T*k) that are all
// resident at once (a cooperative launch) and meet at one grid barrier.
//
// Why this shape: one CTA walks every pair twice, ~100 instructions per 32
// pairs per walk, all on one SM (33-43 us at T*k = 16K on an H200), and
// every extra kernel in a graph costs ~0.6-2 us of launch gap. One kernel
// over several SMs with one barrier keeps both small (16K pairs on 32 CTAs:
// 10.6 us as the only kernel of a graph, 7.8 us each in a graph of 20). No
// atomics decide an order, so the output is deterministic and equals the
// CPU plan:
//   1. Each warp owns a contiguous range of 32-pair chunks, each CTA the
//      union of its warps' ranges, in pair order. A warp validates its pairs
//      and counts them per expert. Equal experts of a chunk are found with
//      one ballot per expert-id bit; the group's lowest lane adds the group
//      size to the warp's own cursor, so no two warps touch the same shared
//      word. A repeated expert within a token is a same-expert lane among the
//      token's earlier lanes, plus (when k does not divide 32) up to k - 1
//      shuffles into the previous chunk.
//   2. Per expert, a scan down the warps' cursors (earlier warps first) gives
//      each warp its first row within the CTA; the column total is the CTA's
//      count, published with the CTA's first bad pair to global scratch.
//   3. Grid barrier. Every CTA reads all CTAs' counts (E * CTAs ints, capped
//      by the grid size policy), so every CTA knows the totals and its own
//      rows before it: no second barrier, no look-back. The first bad pair is
//      the minimum over the CTAs' ranges (they are in pair order); on bad ids
//      CTA 0 reports it and zeroes num_jobs, max_count, counts and offsets,
//      and nothing else is written.
//   4. One block scan over experts of (rows, jobs) packed in 64 bits gives
//      offsets and each expert's first job; CTA 0 writes the per-expert
//      arrays, and the jobs are spread over all threads of the grid (a
//      binary search over the job offsets finds a job's expert). Light
//      experts (light_max_rows, plan.hpp) are counted by one ballot per
//      warp beside that scan; their jobs go last, in expert order, through
//      a shared list of them.
//   5. Each warp walks its range again and places pair p at
//      offsets[e] + (earlier CTAs' e-pairs) + (earlier warps' e-pairs)
//      + (its own earlier e-pairs), which is the stable order by pair index.
// With one CTA, steps 2-3 stay in shared memory and there is no barrier.
#include <cuda/atomic>

#include "cuda/check.hpp"
#include "cuda/launch.hpp"
#include "cuda/plan_kernels.cuh"
#include "cuda/scheduler.cuh"

namespace nvfp4moe::cuda {
namespace {

constexpr uint32_t kFullMask = 0xFFFFFFFFu;

// The barrier's generation, read by thread 0 before it arrives.
__device__ __forceinline__ uint32_t barrier_generation(GridBarrier* barrier) {
  return ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_device>(barrier->generation)
      .load(::cuda::memory_order_relaxed);
}

// All CTAs of the grid wait here until every one has arrived; the stores each
// CTA made before are then visible to all. It holds only when the whole grid
// is resident, which the cooperative launch guarantees. gen: the generation
// as thread 0 read it (barrier_generation) at any time before arriving; the
// kernel reads it first thing, off the barrier's path. It cannot move until
// this CTA has arrived.
// NOTES: thread 0's release (the arrival) covers the CTA's stores because
// __syncthreads orders them before it; the acquire (the last arrival, or the
// wait) covers what follows the second __syncthreads. The last arrival resets
// the counter before releasing the rest, so the next launch starts from zero.
__device__ __forceinline__ void grid_barrier(GridBarrier* barrier, uint32_t gen) {
  __syncthreads();
  if (threadIdx.x == 0) {
    ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_device> arrived(barrier->arrived);
    ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_device> generation(barrier->generation);
    if (arrived.fetch_add(1, ::cuda::memory_order_acq_rel) == gridDim.x - 1) {
      arrived.store(0, ::cuda::memory_order_relaxed);
      generation.store(gen + 1, ::cuda::memory_order_release);
    } else {
      while (generation.load(::cuda::memory_order_acquire) == gen) {
      }
    }
  }
  __syncthreads();
}

// The lanes whose key equals this lane's, keys in [-1, 2^key_bits): one
// ballot per key bit (and one for key >= 0), each lane keeping the lanes that
// agree with it on every bit.
__device__ __forceinline__ uint32_t lanes_with_same_key(int32_t key, int key_bits) {
  const uint32_t valid = __ballot_sync(kFullMask, key >= 0);
  uint32_t same = key >= 0 ? valid : ~valid;
#pragma unroll 1
  for (int b = 0; b < key_bits; ++b) {
    const bool bit = (key >> b) & 1;
    const uint32_t ones = __ballot_sync(kFullMask, bit);
    same &= bit ? ones : ~ones;
  }
  return same;
}

// Whether this lane's id e repeats one of its token's earlier slots that lie
// in the previous chunk (prev, the same lane layout): pairs d = 1 .. slot
// back with lane < d. Only when k does not divide 32 does a token straddle.
__device__ __forceinline__ bool repeats_in_previous_chunk(int32_t e, int32_t prev, int32_t slot, int lane,
                                                          int32_t top_k) {
  bool repeat = false;
#pragma unroll 1
  for (int d = 1; d < top_k; ++d) {
    const int32_t before = __shfl_sync(kFullMask, prev, (lane - d) & 31);
    repeat |= lane < d && d <= slot && before == e;
  }
  return repeat;
}

// Exclusive sum of one value per thread over the CTA, and the CTA's total.
// warp_sums: kPlanWarps words of shared memory.
__device__ __forceinline__ uint64_t block_exclusive_sum(uint64_t value, uint64_t* warp_sums, uint64_t* total) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint64_t sum = value;
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const uint64_t below = __shfl_up_sync(kFullMask, sum, d);
    if (lane >= d) sum += below;
  }
  if (lane == 31) warp_sums[warp] = sum;
  __syncthreads();
  if (warp == 0) {
    uint64_t warp_sum = warp_sums[lane];
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const uint64_t below = __shfl_up_sync(kFullMask, warp_sum, d);
      if (lane >= d) warp_sum += below;
    }
    warp_sums[lane] = warp_sum;
  }
  __syncthreads();
  *total = warp_sums[kPlanWarps - 1];
  return (warp > 0 ? warp_sums[warp - 1] : 0) + sum - value;
}

}  // namespace

// NOTES: code size is the cost to watch. Each phase runs once per launch, so
// its instructions are fetched cold: a 60 KB build (unrolled chunk batches,
// CUB's block scan) took 5.2 us from first to last instruction at T = 1 on
// an H200, the 21 KB one 3.9 us. Loops over chunks and bits stay rolled.
__global__ void __launch_bounds__(kPlanThreads, 1)
    build_plan_kernel(const int32_t* __restrict__ ids, int32_t num_tokens, int32_t top_k, int32_t num_experts,
                      int32_t block_rows, int32_t light_max_rows, DevicePlan plan) {
  static_assert(kPlanWarps == 32, "the block scan's second level is one warp");
  __shared__ uint64_t warp_sums[kPlanWarps];
  __shared__ int32_t warp_light[kPlanWarps];
  __shared__ int32_t first_bad, max_count;
  extern __shared__ int32_t smem[];
  const int32_t E = num_experts;
  int32_t* cursors = smem;                           // [E][kPlanCursorStride]: see steps 1, 2, 5
  int32_t* total = cursors + E * kPlanCursorStride;  // [E] pairs of expert e (all CTAs)
  int32_t* first_row = total + E;                    // [E] this CTA's first row of expert e
  int32_t* offsets = first_row + E;                  // [E] offsets[e]
  int32_t* job_begin = offsets + E;                  // [E + 1] first job of a non-light expert e; [E]: their count
  int32_t* light_list = job_begin + E + 1;           // [E] the light experts, ascending

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const uint32_t lanes_below = (1u << lane) - 1u;
  const uint32_t num_ctas = gridDim.x, cta = blockIdx.x;
  const int32_t pairs = num_tokens * top_k;

  // Ranges in whole chunks of 32 pairs: CTA after CTA, warp after warp. All
  // unsigned 32-bit: chunks < 2^26, and pair indices stepped past the last
  // one stay below 2^32.
  const uint32_t chunks = (uint32_t(pairs) + 31) / 32;
  const uint32_t cta_chunks = (chunks + num_ctas - 1) / num_ctas;
  const uint32_t warp_chunks = (cta_chunks + kPlanWarps - 1) / kPlanWarps;
  const uint32_t cta_end = min(chunks, (cta + 1) * cta_chunks);
  const uint32_t warp_begin = min(cta_end, cta * cta_chunks + warp * warp_chunks);
  const uint32_t last = min(uint32_t(pairs), min(cta_end, warp_begin + warp_chunks) * 32);
  const uint32_t first = min(last, warp_begin * 32);
  int32_t* my_cursors = cursors + warp;  // expert e at my_cursors[e * kPlanCursorStride]

  // Global loads first, so their latency hides behind clearing shared memory.
  const int32_t slot_step = 32 % top_k;
  const bool straddles = top_k > 1 && slot_step != 0;  // a token may begin in the previous chunk
  int32_t prev = straddles && first > 0 && first < last ? ids[first - 32 + lane] : -1;
  const int32_t first_chunk = first + lane < last ? ids[first + lane] : -1;
  const uint32_t gen = num_ctas > 1 && tid == 0 ? barrier_generation(plan.barrier) : 0;

  for (int i = tid; i < E * kPlanCursorStride; i += kPlanThreads) cursors[i] = 0;
  for (int i = tid; i < E; i += kPlanThreads) total[i] = first_row[i] = 0;
  if (tid == 0) {
    first_bad = INT32_MAX;
    max_count = 0;
  }
  __syncthreads();

  // 1. Validate and count, chunk by chunk; the next chunk's ids are loaded
  // while this one is processed. The slot of a lane moves by 32 mod k per
  // chunk. The warp's first chunk stays in a register for step 5.
  const int key_bits = E > 1 ? 32 - __clz(E - 1) : 0;
  int32_t slot = int32_t((first + lane) % uint32_t(top_k));
  int32_t next = first_chunk;
  int32_t warp_bad = INT32_MAX;
#pragma unroll 1
  for (uint32_t b = first; b < last; b += 32) {
    const uint32_t p = b + lane;
    const int32_t e = next;
    next = p + 32 < last ? ids[p + 32] : -1;
    const bool valid = p < last;
    const bool in_range = valid && e >= 0 && e < E;
    const int32_t key = in_range ? e : -1;
    const uint32_t same = lanes_with_same_key(key, key_bits);
    bool bad = valid && !in_range;
    if (top_k > 1) {
      // The token's earlier slots in this chunk are the lanes [lane - slot, lane).
      const uint32_t token_below = lanes_below & ~((1u << max(lane - slot, 0)) - 1u);
      bool repeat = (same & token_below) != 0;
      if (straddles) repeat |= repeats_in_previous_chunk(e, prev, slot, lane, top_k);  // every lane shuffles
      bad |= in_range && repeat;
      prev = e;
      slot += slot_step;
      if (slot >= top_k) slot -= top_k;
    }
    const uint32_t bad_lanes = __ballot_sync(kFullMask, bad);
    if (bad_lanes != 0 && warp_bad == INT32_MAX) warp_bad = int32_t(b + __ffs(bad_lanes) - 1);
    if (key >= 0 && (same & lanes_below) == 0) my_cursors[key * kPlanCursorStride] += __popc(same);
    __syncwarp();
  }
  if (lane == 0 && warp_bad != INT32_MAX) atomicMin(&first_bad, warp_bad);
  __syncthreads();

  // 2. Per expert, the warps' counts become their first rows within the CTA.
  const int32_t counts_stride = int32_t(plan_counts_stride(E));
  for (int e = tid; e < counts_stride; e += kPlanThreads) {
    int32_t sum = 0;
    if (e < E) {
#pragma unroll 8
      for (int w = 0; w < kPlanWarps; ++w) {
        const int32_t n = cursors[e * kPlanCursorStride + w];
        cursors[e * kPlanCursorStride + w] = sum;
        sum += n;
      }
    }
    if (num_ctas == 1) {
      if (e < E) total[e] = sum;
    } else {
      plan.cta_counts[cta * counts_stride + e] = sum;  // the padding columns get 0
    }
  }

  // 3. Exchange counts and first bad pairs through global scratch.
  if (num_ctas > 1) {
    if (tid == 0) plan.cta_first_bad[cta] = first_bad;
    grid_barrier(plan.barrier, gen);
    // Rows of int4, `groups` CTAs' rows at a time; integer sums, so the
    // shared atomics cannot change the result. L2 loads (__ldcg): the rows
    // were written by other SMs.
    const int32_t other_bad = tid < int(num_ctas) ? __ldcg(plan.cta_first_bad + tid) : INT32_MAX;
    const int quads = counts_stride / 4, groups = kPlanThreads / quads;
    if (tid < groups * quads) {
      const int q = tid % quads;
      int4 all = {0, 0, 0, 0}, before = {0, 0, 0, 0};
#pragma unroll 4
      for (uint32_t c = tid / quads; c < num_ctas; c += groups) {
        const int4 n = __ldcg(reinterpret_cast<const int4*>(plan.cta_counts + c * counts_stride) + q);
        all.x += n.x, all.y += n.y, all.z += n.z, all.w += n.w;
        if (c < cta) before.x += n.x, before.y += n.y, before.z += n.z, before.w += n.w;
      }
      const int32_t alls[4] = {all.x, all.y, all.z, all.w}, befores[4] = {before.x, before.y, before.z, before.w};
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int e = 4 * q + i;
        if (e < E && alls[i] != 0) atomicAdd(&total[e], alls[i]);
        if (e < E && befores[i] != 0) atomicAdd(&first_row[e], befores[i]);
      }
    }
    if (other_bad != INT32_MAX) atomicMin(&first_bad, other_bad);
  }
  __syncthreads();

  if (first_bad != INT32_MAX) {
    if (cta == 0) {
      if (tid == 0) {
        const int32_t p = first_bad, e = ids[p];
        *plan.status = {e < 0 || e >= E ? kPlanIdOutOfRange : kPlanDuplicateId, p / top_k, p % top_k, e};
        *plan.num_jobs = 0;
        *plan.light_jobs_begin = 0;
        *plan.max_count = 0;
      }
      // No expert has rows, so not even the rectangular schedule (which
      // reads counts, not jobs) touches a row.
      for (int e = tid; e <= E; e += kPlanThreads) {
        if (e < E) plan.counts[e] = 0;
        plan.offsets[e] = 0;
      }
    }
    return;
  }

  // 4. Offsets and job offsets over experts, in one scan: rows in the low
  // word (their sum is T*k < 2^31, no carry), jobs in the high word. A light
  // expert has one job (light_max_rows <= block_rows) and no place in the
  // scan's jobs; the warps' ballots of light experts are summed beside it
  // (block_exclusive_sum's barriers publish warp_light).
  int32_t num_light = 0;
  {
    const int e = tid;
    const int32_t n = e < E ? total[e] : 0;
    const bool light = n > 0 && n <= light_max_rows;
    const uint32_t light_lanes = __ballot_sync(kFullMask, light);
    if (lane == 0) warp_light[warp] = __popc(light_lanes);
    const int32_t tiles = light ? 0 : n / block_rows + (n % block_rows != 0);
    uint64_t all = 0;
    const uint64_t before = block_exclusive_sum((uint64_t(tiles) << 32) | uint32_t(n), warp_sums, &all);
    const int32_t row0 = int32_t(uint32_t(before)), job0 = int32_t(before >> 32);
    const int32_t light_count = warp_light[lane];
    num_light = __reduce_add_sync(kFullMask, light_count);
    const int32_t light_before =
        __reduce_add_sync(kFullMask, lane < warp ? light_count : 0) + __popc(light_lanes & lanes_below);
    if (e < E) {
      offsets[e] = row0;
      job_begin[e] = job0;
      first_row[e] += row0;
      if (light) light_list[light_before] = e;
      if (cta == 0) {
        plan.counts[e] = n;
        plan.offsets[e] = row0;
      }
    }
    if (tid == 0) job_begin[E] = int32_t(all >> 32);
    const int32_t warp_max = __reduce_max_sync(kFullMask, n);
    if (cta == 0 && lane == 0) atomicMax(&max_count, warp_max);
  }
  __syncthreads();
  const uint32_t light_begin = uint32_t(job_begin[E]), num_jobs = light_begin + uint32_t(num_light);
  if (cta == 0 && tid == 0) {
    plan.offsets[E] = pairs;
    *plan.num_jobs = int32_t(num_jobs);
    *plan.light_jobs_begin = int32_t(light_begin);
    *plan.max_count = max_count;
    *plan.status = {kPlanOk, 0, 0, 0};
  }

  // Jobs, spread over the grid. Expert of job j < light_begin: the last e
  // with job_begin[e] <= j (an empty or light expert shares its job_begin
  // with the next); past it, the light experts in order.
#pragma unroll 1
  for (uint32_t j = cta * kPlanThreads + tid; j < num_jobs; j += num_ctas * kPlanThreads) {
    if (j >= light_begin) {
      const int32_t e = light_list[j - light_begin];
      plan.jobs[j] = {e, offsets[e], total[e], tile_rows_for(total[e], block_rows)};
      continue;
    }
    int lo = 0, hi = E;  // job_begin[lo] <= j < job_begin[hi]
#pragma unroll 1
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (uint32_t(job_begin[mid]) <= j) lo = mid;
      else hi = mid;
    }
    const int32_t done = (int32_t(j) - job_begin[lo]) * block_rows;
    const int32_t rows = min(block_rows, total[lo] - done);
    plan.jobs[j] = {lo, offsets[lo] + done, rows, tile_rows_for(rows, block_rows)};
  }

  // 5. Stable scatter, each warp over its own range again (from its first
  // chunk's register, then re-reading ids, one chunk ahead).
  next = first_chunk;
#pragma unroll 1
  for (uint32_t b = first; b < last; b += 32) {
    const uint32_t p = b + lane;
    const int32_t e = next;
    next = p + 32 < last ? ids[p + 32] : -1;
    const uint32_t same = lanes_with_same_key(e, key_bits);
    int32_t start = 0;
    if (e >= 0 && (same & lanes_below) == 0) {
      start = my_cursors[e * kPlanCursorStride];
      my_cursors[e * kPlanCursorStride] = start + __popc(same);
    }
    start = __shfl_sync(kFullMask, start, __ffs(same) - 1);
    if (e >= 0) {
      const int32_t r = first_row[e] + start + __popc(same & lanes_below);
      plan.sorted_src[r] = int32_t(p);
      plan.inverse[p] = r;
    }
    __syncwarp();
  }
}

Status launch_build_plan(const int32_t* ids, int64_t num_tokens, int64_t top_k, int64_t num_experts,
                         int32_t block_rows, int32_t light_max_rows, const DevicePlan& plan, cudaStream_t stream) {
  // One thread per expert in the scans over experts.
  if (num_experts > kPlanThreads)
    return make_status(StatusCode::kOutOfRange, "num_experts = ", num_experts, " exceeds the plan kernel's ",
                       kPlanThreads);
  const int ctas = plan_grid_ctas(num_tokens * top_k, num_experts, plan.max_ctas);
  const size_t smem = plan_smem_bytes(num_experts);
  NVFP4MOE_CUDA_TRY(cudaFuncSetAttribute(build_plan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  // Cooperative: the driver refuses the launch rather than let the grid
  // barrier wait for a CTA that cannot become resident.
  cudaLaunchAttribute cooperative = {};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  NVFP4MOE_CUDA_TRY(launch_kernel_with(build_plan_kernel, dim3(unsigned(ctas)), dim3(kPlanThreads), smem, stream,
                                       ctas > 1 ? &cooperative : nullptr, ids, int32_t(num_tokens), int32_t(top_k),
                                       int32_t(num_experts), block_rows, light_max_rows, plan));
  NVFP4MOE_CUDA_CHECK_LAUNCH("build_plan_kernel");
  return ok_status();
}

}  // namespace nvfp4moe::cuda
