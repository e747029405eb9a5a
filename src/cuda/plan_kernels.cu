// The plan is built by a grid of CTAs (one for small T*k) that are all
// resident at once (a cooperative launch) and meet at one grid barrier.
//
// Why this shape: one CTA walks every pair twice, ~100 instructions per 32
// pairs per walk, all on one SM (33-43 us at T*k = 16K on an H200), and
// every extra kernel in a graph costs ~0.6-2 us of launch gap. One kernel
// over several SMs with one barrier keeps both small (16K pairs on 32 CTAs:
// 6.6 us per plan in a graph of 8 plans, 0.9 us of it the launch of an empty
// kernel). No atomics decide an order, so the output is deterministic and
// equals the CPU plan:
//   1. Each warp owns a contiguous range of 32-pair chunks, each CTA the
//      union of its warps' ranges, in pair order. A warp validates its pairs
//      and counts them per expert. Equal experts of a chunk are found with
//      one ballot per expert-id bit; the group's lowest lane adds the group
//      size to the warp's own cursor, so no two warps touch the same shared
//      word. A repeated expert within a token is a same-expert lane among the
//      token's earlier lanes, plus (when k does not divide 32) up to k - 1
//      shuffles into the previous chunk.
//   2. Per expert, a scan over the warps' cursors (earlier warps first) gives
//      each warp its first row within the CTA; the column total is the CTA's
//      count, published with the CTA's first bad pair to global scratch.
//   3. Grid barrier (one release add and one poll per CTA). Every CTA reads
//      all CTAs' counts (E * CTAs ints, capped by the grid size policy), so
//      every CTA knows the totals and its own rows before it: no second
//      barrier, no look-back. The first bad pair is
//      the minimum over the CTAs' ranges (they are in pair order); on bad ids
//      CTA 0 reports it and zeroes num_jobs, max_count, counts and offsets,
//      and nothing else is written.
//   4. One block scan over experts of (rows, jobs) packed in 64 bits gives
//      offsets and each expert's first job; CTA 0 writes the per-expert
//      arrays, and the jobs are spread over the grid from each CTA's last
//      threads, which step 5 leaves idle where it can (a binary search over
//      the job offsets finds a job's expert). Light experts (light_max_rows,
//      plan.hpp) are counted by one ballot per warp beside that scan; their
//      jobs go last, in expert order, through a shared list of them. Broad
//      experts' (broad_rows) tiles are summed by a warp scan beside it too,
//      and their jobs go between, found by the same search over their own
//      job offsets.
//   5. Each warp walks its range again and places pair p at
//      offsets[e] + (earlier CTAs' e-pairs) + (earlier warps' e-pairs)
//      + (its own earlier e-pairs), which is the stable order by pair index.
// With one CTA, steps 2-3 stay in shared memory and there is no barrier.
// Each phase runs once per launch on a few hundred pairs per CTA, so what
// it costs is its latency chain and the instructions its warps issue: the
// phases over experts run on the warps that hold one, and the host computes
// the geometry (PlanGeometry) so that the kernel divides once. Timeline per
// phase (H200, T = 2048): bench/results/ncu/2026-12-01-plan-timeline.sh.
#include <cuda/atomic>

#include "cuda/check.hpp"
#include "cuda/launch.hpp"
#include "cuda/plan_kernels.cuh"
#include "cuda/ptx/grid_dependency.cuh"
#include "cuda/scheduler.cuh"

namespace nvfp4moe::cuda {
namespace {

constexpr uint32_t kFullMask = 0xFFFFFFFFu;

// This launch's starting count of the barrier, read by thread 0 at any time
// before it arrives: until every CTA has arrived the count lies in
// [start, start + kGridBarrierSpan), start a multiple of the span.
__device__ __forceinline__ uint32_t barrier_start(GridBarrier* barrier) {
  return ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_device>(barrier->arrived)
             .load(::cuda::memory_order_relaxed) &
         ~(kGridBarrierSpan - 1);
}

// All CTAs of the grid wait here until every one has arrived; the stores each
// CTA made before are then visible to all. It holds only when the whole grid
// is resident, which the cooperative launch guarantees. start: barrier_start,
// read first thing, off the barrier's path.
// NOTES: one release add per CTA (no return value to wait for) and one
// acquire poll: a fetch-add whose last arrival then stored a generation for
// the others to see took two more trips to L2 (1.3 us from the last CTA's
// arrival to all passing, H200 timeline). The release covers the CTA's
// stores because __syncthreads orders them before it; the acquire covers
// what follows the second __syncthreads.
__device__ __forceinline__ void grid_barrier(GridBarrier* barrier, uint32_t start) {
  __syncthreads();
  if (threadIdx.x == 0) {
    ::cuda::atomic_ref<uint32_t, ::cuda::thread_scope_device> arrived(barrier->arrived);
    arrived.fetch_add(blockIdx.x == 0 ? kGridBarrierSpan + 1 - gridDim.x : 1, ::cuda::memory_order_release);
    while (arrived.load(::cuda::memory_order_acquire) - start < kGridBarrierSpan) {
    }
  }
  __syncthreads();
}

// The lanes whose key equals this lane's, keys in [-1, 2^key_bits): one
// ballot per key bit (and one for key >= 0), each lane keeping the lanes that
// agree with it on every bit. Not inlined: one copy serves steps 1 and 5.
__device__ __noinline__ uint32_t lanes_with_same_key(int32_t key, int key_bits) {
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

// The expert of job j of a range whose experts' first jobs are begin[0 .. E)
// (non-decreasing, begin[0] = 0, j below the range's total): the last e with
// begin[e] <= j, since an expert without jobs in the range shares its
// begin with the next. Fixed power-of-two steps from search_from (at least
// one, so that ptxas keeps one copy of the loop).
__device__ __forceinline__ int32_t expert_of_job(const int32_t* begin, int32_t E, uint32_t j, int search_from) {
  int32_t e = 0;
  int step = search_from;
#pragma unroll 1
  do {
    if (e + step < E && uint32_t(begin[e + step]) <= j) e += step;
    step >>= 1;
  } while (step > 0);
  return e;
}

// Exclusive sum of one value per thread over the first `warps` warps of the
// CTA, and their total. Every thread calls it (its barriers are the CTA's);
// the other warps' values must be 0, and they skip the shuffles.
// warp_sums: kPlanWarps words of shared memory.
// NOTES: with the scanning warps alone at a named barrier, racecheck
// reported the writes before the CTA barrier that follows as racing the
// reads after it (compute-sanitizer at 331727e).
__device__ __forceinline__ uint64_t block_exclusive_sum(uint64_t value, int warps, uint64_t* warp_sums,
                                                        uint64_t* total) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  uint64_t sum = value;
  if (warp < warps) {
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
      const uint64_t below = __shfl_up_sync(kFullMask, sum, d);
      if (lane >= d) sum += below;
    }
    if (lane == 31) warp_sums[warp] = sum;
  }
  __syncthreads();
  if (warp == 0) {
    uint64_t warp_sum = lane < warps ? warp_sums[lane] : 0;
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

// NOTES: the cost to watch is the instructions the warps issue, not the code
// size: fetching cold code is nearly free (33 KB of straight-line adds in one
// warp: 1.24 us cold, 1.16 us warm, plan-timeline probe), but a phase that
// all 32 warps run issues 32 copies of its instructions. A 60 KB build
// (unrolled chunk batches, CUB's block scan) took 5.2 us from first to last
// instruction at T = 1, the 21 KB one 3.9 us. Loops over chunks and bits stay
// rolled.
__global__ void __launch_bounds__(kPlanThreads, 1)
    build_plan_kernel(const int32_t* __restrict__ ids, int32_t num_tokens, int32_t top_k, int32_t num_experts,
                      int32_t block_rows, int32_t light_max_rows, int32_t broad_rows, PlanGeometry geometry,
                      DevicePlan plan, bool next_overlaps) {
  static_assert(kPlanWarps == 32, "the block scan's second level is one warp");
  // The F32 activations' conversion may run beside the plan (launch_build_plan).
  if (next_overlaps) ptx::launch_dependents();
  __shared__ uint64_t warp_sums[kPlanWarps];
  __shared__ int32_t warp_light[kPlanWarps], warp_broad[kPlanWarps];
  __shared__ int32_t first_bad, max_count, jobs_total;
  extern __shared__ int32_t smem[];
  const int32_t E = num_experts;
  int32_t* cursors = smem;                           // [E][kPlanCursorStride]: see steps 1, 2, 5
  int32_t* total = cursors + E * kPlanCursorStride;  // [E] pairs of expert e (all CTAs)
  int32_t* first_row = total + E;                    // [E] this CTA's first row of expert e
  int32_t* offsets = first_row + E;                  // [E] offsets[e]
  int32_t* job_begin = offsets + E;                  // [E + 1] first job of a regular expert e; [E]: their count
  int32_t* broad_begin = job_begin + E + 1;          // [E + 1] the same over the broad experts' jobs
  int32_t* light_list = broad_begin + E + 1;         // [E] the light experts, ascending

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const uint32_t lanes_below = (1u << lane) - 1u;
  const uint32_t num_ctas = gridDim.x, cta = blockIdx.x;
  const int32_t pairs = num_tokens * top_k;

  // Ranges in whole chunks of 32 pairs: CTA after CTA, warp after warp. All
  // unsigned 32-bit: chunks < 2^26, and pair indices stepped past the last
  // one stay below 2^32.
  const uint32_t chunks = (uint32_t(pairs) + 31) / 32;
  const uint32_t cta_chunks = geometry.cta_chunks, warp_chunks = geometry.warp_chunks;
  const uint32_t cta_end = min(chunks, (cta + 1) * cta_chunks);
  const uint32_t warp_begin = min(cta_end, cta * cta_chunks + warp * warp_chunks);
  const uint32_t last = min(uint32_t(pairs), min(cta_end, warp_begin + warp_chunks) * 32);
  const uint32_t first = min(last, warp_begin * 32);
  int32_t* my_cursors = cursors + warp;  // expert e at my_cursors[e * kPlanCursorStride]

  // Global loads first, so their latency hides behind clearing shared memory.
  const int32_t slot_step = geometry.slot_step;
  const bool straddles = top_k > 1 && slot_step != 0;  // a token may begin in the previous chunk
  int32_t prev = straddles && first > 0 && first < last ? ids[first - 32 + lane] : -1;
  const int32_t first_chunk = first + lane < last ? ids[first + lane] : -1;
  const uint32_t barrier_from = num_ctas > 1 && tid == 0 ? barrier_start(plan.barrier) : 0;

#pragma unroll 1
  for (int i = tid; i < E * kPlanCursorStride; i += kPlanThreads) cursors[i] = 0;
#pragma unroll 1
  for (int i = tid; i < E; i += kPlanThreads) total[i] = first_row[i] = 0;
  if (tid == 0) {
    first_bad = INT32_MAX;
    max_count = 0;
  }
  __syncthreads();

  // 1. Validate and count, chunk by chunk; the next chunk's ids are loaded
  // while this one is processed. The slot of a lane moves by 32 mod k per
  // chunk. The warp's first chunk stays in a register for step 5.
  const int key_bits = geometry.key_bits;
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

  // 2. Per expert, the warps' counts become their first rows within the CTA:
  // with one CTA the totals, else this CTA's row of counts (the padding
  // columns get 0). Eight lanes per expert, four warps' cursors each, and a
  // scan over the eight: a serial walk down 32 cursors per expert was a
  // chain of 32 shared loads.
  const int32_t counts_stride = 4 << geometry.quad_bits;
  int32_t* const counts_out = num_ctas == 1 ? total : plan.cta_counts + cta * counts_stride;
  static_assert(kPlanWarps == 8 * 4, "eight lanes of four cursors per expert");
#pragma unroll 1
  for (int i = tid; i < ((8 * E + 31) & ~31); i += kPlanThreads) {
    const int e = i / 8, w0 = 4 * (i % 8);
    int32_t* const col = cursors + e * kPlanCursorStride + w0;
    int32_t n[4] = {0, 0, 0, 0};
    if (e < E) n[0] = col[0], n[1] = col[1], n[2] = col[2], n[3] = col[3];
    const int32_t part = n[0] + n[1] + n[2] + n[3];
    int32_t sum = part;  // inclusive over this expert's lanes up to this one
#pragma unroll
    for (int d = 1; d < 8; d *= 2) {
      const int32_t below = __shfl_up_sync(kFullMask, sum, d, 8);
      if (i % 8 >= d) sum += below;
    }
    if (e < E) {
      const int32_t first = sum - part;
      col[0] = first, col[1] = first + n[0], col[2] = first + n[0] + n[1], col[3] = first + n[0] + n[1] + n[2];
      if (i % 8 == 7) counts_out[e] = sum;
    }
  }
#pragma unroll 1
  for (int e = E + tid; num_ctas > 1 && e < counts_stride; e += kPlanThreads) counts_out[e] = 0;

  // 3. Exchange counts and first bad pairs through global scratch.
  if (num_ctas > 1) {
    if (tid == 0) plan.cta_first_bad[cta] = first_bad;
    grid_barrier(plan.barrier, barrier_from);
    // Rows of int4, kPlanThreads / quads CTAs' rows at a time; integer
    // sums, so the shared atomics cannot change the result. L2 loads (__ldcg): the rows
    // were written by other SMs.
    const int32_t other_bad = tid < int(num_ctas) ? __ldcg(plan.cta_first_bad + tid) : INT32_MAX;
    // quads <= 256 <= kPlanThreads, so every thread has a quad.
    const int q = tid & ((1 << geometry.quad_bits) - 1);
    int4 all = {0, 0, 0, 0}, before = {0, 0, 0, 0};
#pragma unroll 1
    for (uint32_t c = tid >> geometry.quad_bits; c < num_ctas; c += kPlanThreads >> geometry.quad_bits) {
      const int4 n = __ldcg(reinterpret_cast<const int4*>(plan.cta_counts + c * counts_stride) + q);
      all.x += n.x, all.y += n.y, all.z += n.z, all.w += n.w;
      if (c < cta) before.x += n.x, before.y += n.y, before.z += n.z, before.w += n.w;
    }
    // Unconditional adds (of 0 too): fewer instructions than a test each.
    if (4 * q < E) {
      int32_t* const t = total + 4 * q;
      int32_t* const f = first_row + 4 * q;
      atomicAdd(t, all.x), atomicAdd(f, before.x);
      if (4 * q + 1 < E) atomicAdd(t + 1, all.y), atomicAdd(f + 1, before.y);
      if (4 * q + 2 < E) atomicAdd(t + 2, all.z), atomicAdd(f + 2, before.z);
      if (4 * q + 3 < E) atomicAdd(t + 3, all.w), atomicAdd(f + 3, before.w);
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
        *plan.broad_jobs_begin = 0;
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
  // word (their sum is T*k < 2^31, no carry), regular jobs in the high word.
  // A light expert has one job (light_max_rows <= block_rows) and no place
  // in the scan's jobs; the warps' ballots of light experts are summed beside
  // it, and so are the warps' scans of broad tiles (block_exclusive_sum's
  // barriers publish warp_light and warp_broad). Only the warps that
  // hold an expert do its work: the phase is issue-bound, and the others
  // would issue the same instructions for nothing; they meet the scan's
  // barriers only.
  const int scan_warps = (E + 31) / 32;
  {
    const bool scans = warp < scan_warps;
    const int e = tid;
    int32_t n = 0, tiles = 0, broad_tiles = 0, broad_through = 0;  // broad_through: inclusive over the warp
    bool light = false;
    uint32_t light_lanes = 0;
    if (scans) {
      n = e < E ? total[e] : 0;
      const ExpertClass c = expert_class_of(n, light_max_rows, block_rows, broad_rows);
      light = n > 0 && c == ExpertClass::kLight;
      light_lanes = __ballot_sync(kFullMask, light);
      if (lane == 0) warp_light[warp] = __popc(light_lanes);
      const bool broad = c == ExpertClass::kBroad;
      broad_tiles = broad ? (n + broad_rows - 1) / broad_rows : 0;
      broad_through = broad_tiles;
#pragma unroll
      for (int d = 1; d < 32; d *= 2) {
        const int32_t below = __shfl_up_sync(kFullMask, broad_through, d);
        if (lane >= d) broad_through += below;
      }
      if (lane == 31) warp_broad[warp] = broad_through;
      tiles = light || broad ? 0 : n / block_rows + (n % block_rows != 0);
    }
    uint64_t all = 0;
    const uint64_t before = block_exclusive_sum((uint64_t(tiles) << 32) | uint32_t(n), scan_warps, warp_sums, &all);
    if (scans) {
      const int32_t row0 = int32_t(uint32_t(before)), job0 = int32_t(before >> 32);
      const int32_t light_count = lane < scan_warps ? warp_light[lane] : 0;
      const int32_t num_light = __reduce_add_sync(kFullMask, light_count);
      const int32_t light_before =
          __reduce_add_sync(kFullMask, lane < warp ? light_count : 0) + __popc(light_lanes & lanes_below);
      const int32_t broad_count = lane < scan_warps ? warp_broad[lane] : 0;
      const int32_t num_broad = __reduce_add_sync(kFullMask, broad_count);
      const int32_t broad0 = __reduce_add_sync(kFullMask, lane < warp ? broad_count : 0) + broad_through - broad_tiles;
      if (e < E) {
        offsets[e] = row0;
        job_begin[e] = job0;
        broad_begin[e] = broad0;
        first_row[e] += row0;
        if (light) light_list[light_before] = e;
        if (cta == 0) {
          plan.counts[e] = n;
          plan.offsets[e] = row0;
        }
      }
      if (tid == 0) {
        job_begin[E] = int32_t(all >> 32);
        broad_begin[E] = num_broad;
        jobs_total = int32_t(all >> 32) + num_broad + num_light;
      }
      const int32_t warp_max = __reduce_max_sync(kFullMask, n);
      if (cta == 0 && lane == 0) atomicMax(&max_count, warp_max);
    }
  }
  __syncthreads();
  const uint32_t broad_from = uint32_t(job_begin[E]), light_begin = broad_from + uint32_t(broad_begin[E]);
  const uint32_t num_jobs = uint32_t(jobs_total);
  if (cta == 0 && tid == 0) {
    plan.offsets[E] = pairs;
    *plan.num_jobs = int32_t(num_jobs);
    *plan.broad_jobs_begin = int32_t(broad_from);
    *plan.light_jobs_begin = int32_t(light_begin);
    *plan.max_count = max_count;
    *plan.status = {kPlanOk, 0, 0, 0};
  }

  // Jobs, spread over the grid: the regular experts' (expert_of_job over
  // job_begin), the broad experts' (over broad_begin), then the light
  // experts in order. One path for every kind (a light expert's rows fit one
  // job). The jobs go to the CTA's last threads first: step 5 runs on its
  // first warps, so where a CTA's range leaves warps idle the jobs and the
  // scatter overlap.
  const int search_from = 1 << max(geometry.key_bits - 1, 0);
#pragma unroll 1
  for (uint32_t j = cta * kPlanThreads + (kPlanThreads - 1 - tid); j < num_jobs; j += num_ctas * kPlanThreads) {
    int32_t e, done = 0, tile = block_rows;
    if (j >= light_begin) {
      e = light_list[j - light_begin];
    } else if (j >= broad_from) {
      e = expert_of_job(broad_begin, E, j - broad_from, search_from);
      tile = broad_rows;
      done = (int32_t(j - broad_from) - broad_begin[e]) * broad_rows;
    } else {
      e = expert_of_job(job_begin, E, j, search_from);
      done = (int32_t(j) - job_begin[e]) * block_rows;
    }
    const int32_t rows = min(tile, total[e] - done);
    plan.jobs[j] = {e, offsets[e] + done, rows, job_tile_rows(rows, tile)};
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
                         int32_t block_rows, int32_t light_max_rows, int32_t broad_rows, const DevicePlan& plan,
                         cudaStream_t stream, bool next_overlaps) {
  // One thread per expert in the scans over experts.
  if (num_experts > kPlanThreads)
    return make_status(StatusCode::kOutOfRange, "num_experts = ", num_experts, " exceeds the plan kernel's ",
                       kPlanThreads);
  const int ctas = plan_grid_ctas(num_tokens * top_k, num_experts, plan.max_ctas);
  const PlanGeometry geometry = plan_geometry(num_tokens * top_k, top_k, num_experts, ctas);
  const size_t smem = plan_smem_bytes(num_experts);
  NVFP4MOE_CUDA_TRY(cudaFuncSetAttribute(build_plan_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  // Cooperative: the driver refuses the launch rather than let the grid
  // barrier wait for a CTA that cannot become resident.
  cudaLaunchAttribute cooperative = {};
  cooperative.id = cudaLaunchAttributeCooperative;
  cooperative.val.cooperative = 1;
  NVFP4MOE_CUDA_TRY(launch_kernel_with(build_plan_kernel, dim3(unsigned(ctas)), dim3(kPlanThreads), smem, stream,
                                       ctas > 1 ? &cooperative : nullptr, ids, int32_t(num_tokens), int32_t(top_k),
                                       int32_t(num_experts), block_rows, light_max_rows, broad_rows, geometry, plan,
                                       next_overlaps));
  NVFP4MOE_CUDA_CHECK_LAUNCH("build_plan_kernel");
  return ok_status();
}

}  // namespace nvfp4moe::cuda
