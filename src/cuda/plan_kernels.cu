// The plan is built by a grid of CTAs (one for small T*k) that are all
// resident at once (a cooperative launch) and meet at one grid barrier.
//
// Why this shape: the work is ~10 instructions per pair, so a single CTA is
// issue bound (43 us at T*k = 16K on an H200), and every extra kernel in a
// graph costs 1-2 us of launch gap. One kernel over several SMs with one
// barrier keeps both small. No atomics decide an order, so the output is
// deterministic and equals the CPU plan:
//   1. Each warp owns a contiguous range of 32-pair chunks, each CTA the
//      union of its warps' ranges, in pair order. A warp validates its pairs
//      (the earlier slots of a token are at most 31 pairs back, in this chunk
//      or the previous one, so shuffles compare them) and counts them per
//      expert: __match_any_sync groups equal experts of a chunk and the group
//      leader adds the group size to the warp's own cursor, so no two warps
//      touch the same shared word.
//   2. Per expert, a scan down the warps' cursors (earlier warps first) gives
//      each warp its first row within the CTA; the column total is the CTA's
//      count, published with the CTA's first bad pair to global scratch.
//   3. Grid barrier. Every CTA reads all CTAs' counts (E * CTAs ints, small
//      since the grid is at most one CTA per SM), so every CTA knows the
//      totals and its own rows before it: no second barrier, no look-back.
//      The first bad pair is the minimum over the CTAs' ranges (they are in
//      pair order); on bad ids CTA 0 reports it and zeroes num_jobs,
//      max_count, counts and offsets, and nothing else is written.
//   4. One block scan over experts of (rows, jobs) packed in 64 bits gives
//      offsets and each expert's first job; CTA 0 writes the per-expert
//      arrays, and the jobs are spread over all threads of the grid (a
//      binary search over the job offsets finds a job's expert).
//   5. Each warp walks its range again (from registers when it is at most
//      kPlanHeldChunks chunks) and places pair p at
//      offsets[e] + (earlier CTAs' e-pairs) + (earlier warps' e-pairs)
//      + (its own earlier e-pairs), which is the stable order by pair index.
// With one CTA, steps 2-3 stay in shared memory and there is no barrier.
#include <cuda/atomic>
#include <cub/block/block_scan.cuh>

#include "cuda/check.hpp"
#include "cuda/launch.hpp"
#include "cuda/plan_kernels.cuh"
#include "cuda/scheduler.cuh"

namespace nvfp4moe::cuda {
namespace {

constexpr uint32_t kFullMask = 0xFFFFFFFFu;

// All CTAs of the grid wait here until every one has arrived; the stores each
// CTA made before are then visible to all. The barrier holds only when the
// whole grid is resident, which the cooperative launch guarantees.
// NOTES: the fences around the arrival and the wait are what make the
// CTAs' plain stores visible (cooperative groups' grid sync does the same).
// The generation is read before arriving: it cannot move until this CTA has
// arrived, and the last arrival resets the counter before releasing the rest,
// so the next launch starts from zero.
__device__ __forceinline__ void grid_barrier(GridBarrier* barrier) {
  __syncthreads();
  if (threadIdx.x == 0) {
    ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_device> arrived(barrier->arrived);
    ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_device> generation(barrier->generation);
    const uint32_t gen = generation.load(::cuda::memory_order_relaxed);
    __threadfence();
    if (arrived.fetch_add(1, ::cuda::memory_order_relaxed) == gridDim.x - 1) {
      arrived.store(0, ::cuda::memory_order_relaxed);
      __threadfence();
      generation.store(gen + 1, ::cuda::memory_order_relaxed);
    } else {
      while (generation.load(::cuda::memory_order_relaxed) == gen) {
      }
    }
    __threadfence();
  }
  __syncthreads();
}

// Loads kPlanHeldChunks chunks of ids from pair b on; lanes past `last` get -1.
__device__ __forceinline__ void load_chunks(const int32_t* ids, uint32_t b, uint32_t last, int lane,
                                            int32_t (&held)[kPlanHeldChunks]) {
#pragma unroll
  for (int i = 0; i < kPlanHeldChunks; ++i) {
    const uint32_t p = b + 32 * i + lane;
    held[i] = p < last ? ids[p] : -1;
  }
}

// Whether this lane's id e repeats one of the `slot` earlier slots of its
// token. Those are the pairs 1 .. slot back (slot < k <= 32): in this chunk
// (lanes below) or the previous one (prev, the same lane layout).
__device__ __forceinline__ bool repeats_earlier_slot(int32_t e, int32_t prev, int32_t slot, int lane,
                                                     int32_t top_k) {
  bool repeat = false;
  for (int d = 1; d < top_k; ++d) {
    const int src = (lane - d) & 31;
    const int32_t here = __shfl_sync(kFullMask, e, src);
    const int32_t before = __shfl_sync(kFullMask, prev, src);
    repeat |= d <= slot && (lane >= d ? here : before) == e;
  }
  return repeat;
}

}  // namespace

__global__ void __launch_bounds__(kPlanThreads, 1)
    build_plan_kernel(const int32_t* __restrict__ ids, int32_t num_tokens, int32_t top_k, int32_t num_experts,
                      int32_t block_rows, DevicePlan plan) {
  // NOTES: the default (raking) scan of 1024 64-bit items spills under the
  // 64-register cap of a 1024-thread CTA; the warp-scans variant does not.
  using Scan = cub::BlockScan<uint64_t, kPlanThreads, cub::BLOCK_SCAN_WARP_SCANS>;
  __shared__ typename Scan::TempStorage scan_storage;
  __shared__ int32_t first_bad, max_count;
  extern __shared__ int32_t smem[];
  const int32_t E = num_experts;
  int32_t* cursors = smem;                              // [E][kPlanCursorStride]: see steps 1, 2, 5
  int32_t* total = cursors + E * kPlanCursorStride;     // [E] pairs of expert e (all CTAs)
  int32_t* first_row = total + E;                       // [E] this CTA's first row of expert e
  int32_t* offsets = first_row + E;                     // [E] offsets[e]
  int32_t* job_begin = offsets + E;                     // [E + 1] first job of expert e; [E] = num_jobs

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const uint32_t lanes_below = (1u << lane) - 1u;
  const int32_t num_ctas = int32_t(gridDim.x), cta = int32_t(blockIdx.x);
  const int32_t pairs = num_tokens * top_k;

  // Ranges in whole chunks of 32 pairs: CTA after CTA, warp after warp.
  // Pair indices are unsigned 32-bit: T*k < 2^31, so stepping past the last
  // pair cannot wrap.
  const int64_t chunks = (int64_t(pairs) + 31) / 32;
  const int64_t cta_chunks = (chunks + num_ctas - 1) / num_ctas;
  const int64_t warp_chunks = (cta_chunks + kPlanWarps - 1) / kPlanWarps;
  const int64_t cta_end = min(chunks, (cta + 1) * cta_chunks);
  const int64_t warp_begin = min(cta_end, cta * cta_chunks + warp * warp_chunks);
  const uint32_t last = uint32_t(min(int64_t(pairs), min(cta_end, warp_begin + warp_chunks) * 32));
  const uint32_t first = min(last, uint32_t(warp_begin * 32));
  const bool held_all = last - first <= 32 * kPlanHeldChunks;
  int32_t* my_cursors = cursors + warp;  // expert e at my_cursors[e * kPlanCursorStride]

  for (int i = tid; i < E * kPlanCursorStride; i += kPlanThreads) cursors[i] = 0;
  for (int i = tid; i < E; i += kPlanThreads) total[i] = first_row[i] = 0;
  if (tid == 0) {
    first_bad = INT32_MAX;
    max_count = 0;
  }
  __syncthreads();

  // 1. Validate and count. The slot of lane 0 moves by 32 mod k per chunk.
  int32_t held[kPlanHeldChunks];
  int32_t prev = top_k > 1 && first > 0 && first < last ? ids[first - 32 + lane] : -1;
  int32_t slot = top_k > 1 ? int32_t((first + lane) % uint32_t(top_k)) : 0;
  const int32_t slot_step = 32 % top_k;
  int32_t warp_bad = INT32_MAX;
  for (uint32_t b = first; b < last; b += 32 * kPlanHeldChunks) {
    load_chunks(ids, b, last, lane, held);
#pragma unroll
    for (int i = 0; i < kPlanHeldChunks; ++i) {
      if (b + 32 * i >= last) break;
      const int32_t e = held[i];
      const bool valid = b + 32 * i + lane < last;
      const bool in_range = valid && e >= 0 && e < E;
      bool bad = valid && !in_range;
      if (top_k > 1) {
        const bool repeat = repeats_earlier_slot(e, prev, slot, lane, top_k);  // every lane shuffles
        bad |= in_range && repeat;
        prev = e;
        slot += slot_step;
        if (slot >= top_k) slot -= top_k;
      }
      const uint32_t bad_lanes = __ballot_sync(kFullMask, bad);
      if (bad_lanes != 0 && warp_bad == INT32_MAX) warp_bad = int32_t(b + 32 * i + __ffs(bad_lanes) - 1);
      const int32_t key = in_range ? e : -1;
      const uint32_t same = __match_any_sync(kFullMask, key);
      if (key >= 0 && (same & lanes_below) == 0) my_cursors[key * kPlanCursorStride] += __popc(same);
      __syncwarp();
    }
  }
  if (lane == 0 && warp_bad != INT32_MAX) atomicMin(&first_bad, warp_bad);
  __syncthreads();

  // 2. Per expert, the warps' counts become their first rows within the CTA.
  const int32_t counts_stride = int32_t(plan_counts_stride(E));
  for (int e = tid; e < counts_stride; e += kPlanThreads) {
    int32_t sum = 0;
    if (e < E) {
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
    grid_barrier(plan.barrier);
    // Rows of int4, `groups` CTAs' rows at a time; integer sums, so the
    // shared atomics cannot change the result.
    const int quads = int(counts_stride / 4), groups = kPlanThreads / quads;
    if (tid < groups * quads) {
      const int q = tid % quads;
      int4 all = {0, 0, 0, 0}, before = {0, 0, 0, 0};
      for (int c = tid / quads; c < num_ctas; c += groups) {
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
    for (int c = tid; c < num_ctas; c += kPlanThreads) atomicMin(&first_bad, __ldcg(plan.cta_first_bad + c));
  }
  __syncthreads();

  if (first_bad != INT32_MAX) {
    if (cta == 0) {
      if (tid == 0) {
        const int32_t p = first_bad, e = ids[p];
        *plan.status = {e < 0 || e >= E ? kPlanIdOutOfRange : kPlanDuplicateId, p / top_k, p % top_k, e};
        *plan.num_jobs = 0;
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
  // word (their sum is T*k < 2^31, no carry), jobs in the high word.
  {
    const int e = tid;
    const int32_t n = e < E ? total[e] : 0;
    const int32_t tiles = n / block_rows + (n % block_rows != 0);
    uint64_t before = 0, all = 0;
    Scan(scan_storage).ExclusiveSum((uint64_t(tiles) << 32) | uint32_t(n), before, all);
    const int32_t row0 = int32_t(uint32_t(before)), job0 = int32_t(before >> 32);
    if (e < E) {
      offsets[e] = row0;
      job_begin[e] = job0;
      first_row[e] += row0;
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
  if (cta == 0 && tid == 0) {
    plan.offsets[E] = pairs;
    *plan.num_jobs = job_begin[E];
    *plan.max_count = max_count;
    *plan.status = {kPlanOk, 0, 0, 0};
  }

  // Jobs, spread over the grid. Expert of job j: the last e with
  // job_begin[e] <= j (an empty expert shares its job_begin with the next).
  const int32_t num_jobs = job_begin[E];
  for (uint32_t j = cta * kPlanThreads + tid; j < uint32_t(num_jobs); j += num_ctas * kPlanThreads) {
    int lo = 0, hi = E;  // job_begin[lo] <= j < job_begin[hi]
    while (hi - lo > 1) {
      const int mid = (lo + hi) / 2;
      if (uint32_t(job_begin[mid]) <= j) lo = mid;
      else hi = mid;
    }
    const int32_t done = (int32_t(j) - job_begin[lo]) * block_rows;
    const int32_t rows = min(block_rows, total[lo] - done);
    plan.jobs[j] = {lo, offsets[lo] + done, rows, tile_rows_for(rows, block_rows)};
  }

  // 5. Stable scatter, each warp over its own range again.
  for (uint32_t b = first; b < last; b += 32 * kPlanHeldChunks) {
    if (!held_all) load_chunks(ids, b, last, lane, held);
#pragma unroll
    for (int i = 0; i < kPlanHeldChunks; ++i) {
      if (b + 32 * i >= last) break;
      const int32_t e = held[i];
      const uint32_t p = b + 32 * i + lane;
      const uint32_t same = __match_any_sync(kFullMask, e);
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
}

Status launch_build_plan(const int32_t* ids, int64_t num_tokens, int64_t top_k, int64_t num_experts,
                         int32_t block_rows, const DevicePlan& plan, cudaStream_t stream) {
  // One thread per expert in the scans over experts.
  if (num_experts > kPlanThreads)
    return make_status(StatusCode::kOutOfRange, "num_experts = ", num_experts, " exceeds the plan kernel's ",
                       kPlanThreads);
  const int ctas = plan_grid_ctas(num_tokens * top_k, plan.max_ctas);
  const size_t smem = plan_smem_bytes(num_experts);
  NVFP4MOE_CUDA_TRY(cudaFuncSetAttribute(build_plan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(unsigned(ctas));
  config.blockDim = dim3(kPlanThreads);
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  // Cooperative: the driver refuses the launch rather than let the grid
  // barrier wait for a CTA that cannot become resident.
  cudaLaunchAttribute cooperative = {};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  config.attrs = &cooperative;
  config.numAttrs = ctas > 1 ? 1 : 0;
  NVFP4MOE_CUDA_TRY(cudaLaunchKernelEx(&config, build_plan_kernel, ids, int32_t(num_tokens), int32_t(top_k),
                                       int32_t(num_experts), block_rows, plan));
  NVFP4MOE_CUDA_CHECK_LAUNCH("build_plan_kernel");
  return ok_status();
}

}  // namespace nvfp4moe::cuda
