// Weight streamer: MUL_MAT_ID for small batches (T <= kStreamKernelMaxTokens).
//
// At decode sizes the op is a read of the hit experts' weights; a routing
// plan (one more launch, ~7 us) and wgmma tiles sized for many tokens only
// add latency. Here the kernel plans for itself:
//   grid  = (64-row blocks of N / kChunks) x (T*k pairs);
//   a CTA reads all ids (<= kStreamMaxPairs), validates them exactly like
//   the plan kernel, and works only if its pair opens a row group of its
//   expert (the first pair routed to it, and from T = 9 the 9th), so every
//   hit expert's weights are read once per row group; it gathers that
//   group's pairs (<= 8 rows, ascending) as the n8 columns of mma.sync.
// Warps: one producer warp streams the CTA's weights (its kChunks 64-row
// chunks are contiguous along K in the sm90 layout) and the expert's
// activation rows over the same K into a ring of shared memory stages with
// 1-D bulk copies (launch.hpp sizes the ring); a few rows that fit
// (streamer_staged_rows) the consumers stage whole after the ring instead.
// The consumers read the rows as mma B fragments with ldmatrix (lanes past
// an expert's rows read its first row again: their output columns are never
// stored).
// NOTES: the first versions loaded the fragments into registers (~37 KB in
// flight per SM). The ring alone did not make it faster (bytes in flight
// were not the limit, launch.hpp), but it leaves each thread at 60
// registers, so three CTAs fit on an SM. The 8 consumer warps are 4 * kChunks
// along N (16 weight rows each: the sm90 fragment layout is one warp's mma
// A fragment) times the rest along K (K blocks dealt round robin inside each
// stage). Until the ring carried the activation rows, the consumers staged
// every batch's rows whole, in B-fragment order (one LDS.128 per two k16
// steps), which at T >= 5 on long K filled shared memory.
// The K partial sums meet in shared memory and are added in warp order,
// then the shared epilogue (alpha, SwiGLU on gate/up chunk pairs, router
// weight, F32/BF16 store) writes the rows.
// K split (p.stream_splits > 1, blockIdx.z = split; forced only,
// choose_stream_splits, launch.hpp): each CTA takes one contiguous K range
// of the weights and rows. It writes its raw sums to p.stream_partial; the last CTA of its
// (row block, expert) to finish, by a counter in p.stream_counters, adds the
// splits in split order and runs the epilogue, then rewinds the counter for
// the next launch.
// Summation order differs from the wgmma path (a different K split), so
// outputs agree with it to fp32 rounding, not bit for bit; for a given
// input and split count they are the same on every run and do not depend on
// the other tokens' routing (each output row's order is fixed).
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/check.hpp"
#include "cuda/dequant.cuh"
#include "cuda/epilogue.cuh"
#include "cuda/launch.hpp"
#include "cuda/pipeline_state.cuh"
#include "cuda/plan_kernels.cuh"
#include "cuda/ptx/async_copy.cuh"
#include "cuda/ptx/grid_dependency.cuh"
#include "cuda/ptx/ld_shared.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/ptx/sync.cuh"

namespace nvfp4moe::cuda {
namespace {

constexpr int kThreads = 256;                   // consumer warps
constexpr int kAllThreads = kThreads + 32;      // + the producer warp
constexpr int kMaxStages = 8;
constexpr uint32_t kConsumerBarrier = 1;        // named barrier of the consumer warps

template <int kChunks>
struct StreamConfig {
  static constexpr int kWarpsN = 4 * kChunks;
  static constexpr int kWarpsK = kThreads / 32 / kWarpsN;
  static constexpr int kRows = 64 * kChunks;      // weight rows of the CTA
  static constexpr int kTileStride = kRows + 4;  // floats between token rows of the tile
  // K blocks per stage: two fragments per consumer warp.
  static constexpr int kStageBlocks = 2 * kWarpsK;
  // A ring slot: the chunks' K blocks, then the activation rows at kXPitch.
  static constexpr int kWeightBytes = kChunks * kStageBlocks * kSm90ChunkBytes;
  static constexpr int kXPitch = int(weight_streamer_x_pitch(kChunks));
};
static_assert(StreamConfig<1>::kWeightBytes == kStreamStageWeightBytes &&
                  StreamConfig<2>::kWeightBytes == kStreamStageWeightBytes,
              "launch.hpp sizes the ring with kStreamStageWeightBytes");
static_assert(StreamConfig<1>::kXPitch == StreamConfig<1>::kStageBlocks * 128 + 16 &&
                  StreamConfig<2>::kXPitch == StreamConfig<2>::kStageBlocks * 128 + 16,
              "a stage's activation row is its K blocks of BF16 and 16 bytes");

template <int kChunks>
struct StreamShared {
  using C = StreamConfig<kChunks>;
  float partial[C::kWarpsK][kStreamCtaRows][C::kRows];
  float tile[kStreamCtaRows * C::kTileStride];
  EpilogueRows rows[kStreamCtaRows];
  int32_t pair_of[kStreamCtaRows];  // the row group's pairs, ascending
  int32_t warp_hits[kThreads / 32];
  int32_t ids[kAllThreads];  // every id of the call (T * k <= kThreads)
  int32_t bad_pair;
  int32_t reduces;     // this CTA finished its (row block, expert) last: it adds the splits
  uint32_t scale_mul;  // kScaleCodeMul
  uint64_t full[kMaxStages];
  uint64_t empty[kMaxStages];  // the slot's weights and activation rows are read
};

// The activation or output row of a pair (the streamer has no sorted order).
__device__ __forceinline__ int64_t pair_row(RowMap map, int32_t pair, int32_t top_k) {
  return map == RowMap::kToken ? pair / top_k : pair;
}

// One F32 activation row, K positions [k0, k0 + k_len), rounded to BF16 in
// row order into xs (k_len / 2 words), by the consumer threads: 8 float4
// loads in flight per thread before the stores; indices are never divided
// by K (ncu at 3d8f74f: the division of a flat index was the staging
// loop's hottest code).
__device__ __forceinline__ void stage_f32_row(const GemmParams& p, int32_t pair, int32_t k0, int32_t k_len,
                                              uint32_t* xs) {
  constexpr int kPerThread = 8;
  const int32_t quarter_k = k_len / 4;
  const float* xf = p.x_f32 + pair_row(p.x_map, pair, p.top_k) * p.x_stride + k0;
  for (int32_t base = threadIdx.x; base < quarter_k; base += kPerThread * kThreads) {
    uint2 v[kPerThread];
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {
      const int32_t i = base + u * kThreads;  // float4 i: words 2 i, 2 i + 1
      v[u] = {0u, 0u};
      if (i < quarter_k) {
        const float4 f = *reinterpret_cast<const float4*>(xf + 4 * i);
        v[u] = {ptx::pack_bf16x2_rn(f.x, f.y), ptx::pack_bf16x2_rn(f.z, f.w)};
      }
    }
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {
      const int32_t i = base + u * kThreads;
      if (i < quarter_k) reinterpret_cast<uint2*>(xs)[i] = v[u];
    }
  }
}

// One BF16 row's copies, K positions [k0, k0 + 64 k_blocks), into dst by the
// consumer threads; the caller waits for them.
__device__ __forceinline__ void issue_bf16_row(const GemmParams& p, int32_t pair, int32_t k0, int32_t k_blocks,
                                               uint8_t* dst) {
  const int32_t pieces = k_blocks * 8;  // 16 bytes each
  const uint16_t* src = p.x + pair_row(p.x_map, pair, p.top_k) * p.x_stride + k0;
  for (int32_t i = int32_t(threadIdx.x); i < pieces; i += kThreads) ptx::cp_async_16_ca(dst + 16 * i, src + 8 * i);
}

// The expert's num_rows BF16 rows, K positions [k0, k0 + 64 k_blocks),
// into xs at pitch (bytes), by the consumer threads. NOTES: H200: copied
// by the producer with the first stage's weights (one bulk copy a row,
// 1decb9b), deepseek's gate_up at T = 1 ran 0.83-0.85x of the consumers'
// cp.async of 802ba60 (bench/results/
// 2026-12-03-h200-ab-streamer-one-release-staged-rows.json; ncu: the same
// SM-active cycles, 1.4x the elapsed ones, DRAM 54% busy against 73%,
// bench/results/ncu/2026-12-03-h200-1decb9b-deepseek-T1-streamer-staged-rows-ncu.txt);
// queued behind the first fill's weights it ran 0.99x, but qwen3's and
// gpt-oss's T = 1 0.87-0.90x (...-streamer-row-copy-order-variants.json).
// The copies here go through L1 (.ca), which the SM's other CTAs of the
// same rows share (3ed43bf, bench/results/
// 2026-12-03-h200-ab-streamer-consumer-staged-rows.json): mixtral's gate_up
// at T = 1 0.96x (0.88x by the producer), deepseek's down 0.94x (0.91x),
// deepseek's gate_up still 0.83x, so its loss is not the row copy
// (docs/perf.md, open questions).
__device__ __forceinline__ void stage_bf16_rows(const GemmParams& p, const int32_t* pair_of, int32_t num_rows,
                                                int32_t k0, int32_t k_blocks, uint8_t* xs, uint32_t pitch) {
  for (int32_t n = 0; n < num_rows; ++n) issue_bf16_row(p, pair_of[n], k0, k_blocks, xs + n * pitch);
  ptx::cp_async_wait_all();
}

// The ring stages of a K range of k_blocks K blocks.
template <int kChunks>
__device__ __forceinline__ int32_t stream_iterations(int32_t k_blocks) {
  return (k_blocks + StreamConfig<kChunks>::kStageBlocks - 1) / StreamConfig<kChunks>::kStageBlocks;
}
// Lane 0 of the producer: the weights of stage it into ring slot `slot`, whose
// full barrier expects them and x_rows activation rows.
template <int kChunks>
__device__ __forceinline__ void post_stage_weights(StreamShared<kChunks>& s, uint8_t* ring, uint32_t stage_bytes,
                                                   const uint8_t* w0, int32_t k_blocks, int32_t chunk_stride,
                                                   int32_t x_rows, int32_t it, int slot) {
  using C = StreamConfig<kChunks>;
  const int32_t kb0 = it * C::kStageBlocks, blocks = min(C::kStageBlocks, k_blocks - kb0);
  const uint32_t bytes = uint32_t(blocks) * kSm90ChunkBytes;
  ptx::mbarrier_arrive_expect_tx(&s.full[slot], kChunks * bytes + uint32_t(x_rows * blocks * 128));
  uint8_t* dst = ring + size_t(slot) * stage_bytes;
#pragma unroll
  for (int c = 0; c < kChunks; ++c)
    ptx::bulk_copy_g2s(dst + c * C::kStageBlocks * kSm90ChunkBytes,
                       w0 + (int64_t(c) * chunk_stride + kb0) * kSm90ChunkBytes, bytes, &s.full[slot]);
}

// Producer warp: stage after stage into the ring, k_blocks K blocks from w0
// in each of the CTA's chunks (chunk_stride K blocks apart), and of each of
// the expert's x_rows activation rows from x_row (none where the consumers
// stage the rows themselves). Once the consumers have read the slot
// (empty), lane 0 copies the weights and posts every byte of the stage,
// before (__syncwarp) lane n < x_rows copies row n (x_row: its first K
// position), so that no copy completes on a barrier that does not expect it
// yet.
// waits_for_x: the rows are the previous kernel's output. posted: the first
// stages whose weights lane 0 posted before the ids check (T = 1).
template <int kChunks>
__device__ void stream_stages(StreamShared<kChunks>& s, uint8_t* ring, int num_stages, uint32_t stage_bytes,
                              const uint8_t* w0, int32_t k_blocks, int32_t chunk_stride, const uint16_t* x_row,
                              int32_t x_rows, bool waits_for_x, int32_t posted) {
  using C = StreamConfig<kChunks>;
  const int lane = int(threadIdx.x % 32);
  const int32_t copiers = max(x_rows, 1);  // lane 0 always copies the weights
  if (lane >= copiers) return;
  const uint32_t workers = (2u << (copiers - 1)) - 1u;
  const bool copies_row = lane < x_rows;
  const int32_t iters = stream_iterations<kChunks>(k_blocks);
  const auto blocks_of = [&](int32_t it) { return min(C::kStageBlocks, k_blocks - it * C::kStageBlocks); };
  const auto weights = [&](int32_t it, int slot) {
    post_stage_weights<kChunks>(s, ring, stage_bytes, w0, k_blocks, chunk_stride, x_rows, it, slot);
  };
  const auto x = [&](int32_t it, int slot) {
    if (!copies_row) return;
    ptx::bulk_copy_g2s(ring + size_t(slot) * stage_bytes + C::kWeightBytes + lane * C::kXPitch,
                       x_row + it * C::kStageBlocks * 64, uint32_t(blocks_of(it)) * 128, &s.full[slot]);
  };
  // The first fill: each stage's rows right behind its weights, or, where
  // they wait for the previous kernel, every stage's weights first.
  const int32_t first_fill = min(iters, num_stages);
  for (int32_t it = 0; it < first_fill; ++it) {
    if (lane == 0 && it >= posted) weights(it, it);
    if (!waits_for_x) {
      __syncwarp(workers);
      x(it, it);
    }
  }
  if (waits_for_x) {
    __syncwarp(workers);
    ptx::grid_dependency_wait();
    for (int32_t it = 0; it < first_fill; ++it) x(it, it);
  }
  PipelineState ps;
  for (int32_t it = 0; it < first_fill; ++it) ps.advance(num_stages);
  for (int32_t it = first_fill; it < iters; ++it, ps.advance(num_stages)) {
    const int slot = ps.stage;
    // The consumers read the slot with ld.shared and ldmatrix (generic
    // proxy); the copies write it through the async proxy (ptx/sync.cuh).
    // NOTES: without this fence, qwen3's down at T = 8 (six fills of five
    // slots) gave other bits in 1-10 of 63 repeated launches, in 7 of 7
    // runs, once the F32 staging got faster: 8-16 outputs of one of a CTA's
    // first two warps, whose fragments open the slot that the refill writes
    // first (GpuMulMatId.RepeatedLaunchesGiveTheSameBits,
    // bench/results/2026-12-01-h200-356172a-ring-refill-fence-repeat.json).
    ptx::mbarrier_wait_parity(&s.empty[slot], ps.phase ^ 1u);
    ptx::fence_proxy_async_shared();
    if (lane == 0) weights(it, slot);
    __syncwarp(workers);
    x(it, slot);
  }
}

// kSplitK: the K split's instance. NOTES: with the split as runtime code in
// every instance, the unsplit calls ran 1-4% slower (A/B at bc3fa33,
// bench/results/2026-11-30-h200-ab-bc3fa33-stream-k-split.json).
// stage_bytes: a ring slot (weight_streamer_stage_bytes); staged_pitch:
// bytes between the rows staged after the ring, 0 where the ring carries
// them (streamer_staged_rows). kCtasPerSm: the occupancy ptxas allots
// registers for (weight_streamer_ctas_per_sm); four per SM cost 1-2% where
// three run (NOTES at kStreamFourCtaBytes), hence two instances.
// kRowGroups: T > kStreamCtaRows, where an expert may have more than one
// row group (three per SM, no K split); an instance of its own, so that the
// T <= 8 instances keep their code (the row groups' cost 1-3% at T = 1 when
// every instance carried them: bench/results/2026-12-04-h200-ab-streamer-
// row-groups.json).
template <int kChunks, bool kSplitK, int kCtasPerSm, bool kRowGroups>
__global__ void __launch_bounds__(kAllThreads, kCtasPerSm) weight_stream_kernel(const __grid_constant__ GemmParams p,
                                                                                int num_stages, uint32_t stage_bytes,
                                                                                uint32_t staged_pitch) {
  using C = StreamConfig<kChunks>;
  constexpr int kWarpsK = C::kWarpsK;
  __shared__ StreamShared<kChunks> s;
  extern __shared__ __align__(128) uint8_t ring[];
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int32_t pairs = p.num_tokens * p.top_k, me = int32_t(blockIdx.y);
  const bool reporter = blockIdx.x == 0 && blockIdx.y == 0 && (!kSplitK || blockIdx.z == 0) && tid == 0;
  const bool producer = warp == kThreads / 32;
  // The next kernel of the layer (down after gate_up, the combine after
  // down) may start its ids check and weight stream beside this one.
  if (p.next_overlaps) ptx::launch_dependents();

  // Rows [64 * kChunks * blockIdx.x, +kRows) x this split's K blocks
  // [kb_begin, +k_blocks) of the pair's expert.
  const int32_t all_k_blocks = p.k / 64, n_blocks = p.n / 64, splits = kSplitK ? int32_t(gridDim.z) : 1;
  const int32_t per_split = (all_k_blocks + splits - 1) / splits;
  const int32_t kb_begin = kSplitK ? int32_t(blockIdx.z) * per_split : 0;
  const int32_t k_blocks = min(all_k_blocks, kb_begin + per_split) - kb_begin;  // > 0: the host never splits emptily
  const auto weights_of = [&](int32_t e) {
    return p.w_packed +
           ((int64_t(e) * n_blocks + int64_t(blockIdx.x) * kChunks) * all_k_blocks + kb_begin) * kSm90ChunkBytes;
  };
  uint8_t* const staged = ring + size_t(num_stages) * stage_bytes;
  // At T = 1 a good pair is its expert's only pair, so the CTA works if the
  // ids are good, and what it reads is known before they are checked: the
  // producer posts the first stages of its pair's expert (an id in range),
  // and the consumers issue the copies of a BF16 row (pair_row of this
  // pair) unless it is the previous kernel's output. With the row early
  // the producer posts its whole first fill, else kEarlyStagesRowLate
  // stages, so that the row's loads after the check do not queue behind a
  // whole fill. A bad call drains these copies and writes nothing.
  // NOTES: H200 variants (bench/results/2026-12-04-h200-probe-streamer-
  // early-start.json, in a graph, T = 1): the whole fill with the BF16 row
  // early ran MUL_MAT_ID 0.98-1.12x, two stages 0.99-1.05x, one 0.98-1.01x;
  // an F32 row staged before the check (its loads block the consumers, so
  // the producer waits at the check for the rest of its fill) lost 2-6%
  // with one stage early or the whole fill, while the row after the check
  // ran 0.99-1.11x with two stages early and 0.94-1.02x with the whole fill.
  constexpr int32_t kEarlyStagesRowLate = 2;
  const bool early = p.num_tokens == 1 && staged_pitch != 0;
  const bool early_row = early && !p.overlaps_previous && !p.x_f32;
  const bool early_x = early_row && !producer;
  const int32_t id = tid < pairs ? p.ids[tid] : -1;  // pairs <= kThreads
  int32_t posted = 0;  // first stages posted by the producer's lane 0
  if (tid == kThreads) {
    for (int i = 0; i < num_stages; ++i) {
      ptx::mbarrier_init(&s.full[i], 1);
      ptx::mbarrier_init(&s.empty[i], kThreads);
    }
    ptx::fence_mbarrier_init();
    const int32_t e = early ? p.ids[me] : -1;
    if (e >= 0 && e < p.num_experts) {
      const int32_t fill = min(stream_iterations<kChunks>(k_blocks), num_stages);
      posted = early_row ? fill : min(fill, kEarlyStagesRowLate);
      for (int32_t it = 0; it < posted; ++it)
        post_stage_weights<kChunks>(s, ring, stage_bytes, weights_of(e), k_blocks, all_k_blocks, 0, it, it);
    }
  }
  if (early_x) issue_bf16_row(p, me, kb_begin * 64, k_blocks, staged);
  const auto drain_early_copies = [&]() {
    if (early_x) ptx::cp_async_wait_all();
    for (int i = 0; i < posted; ++i) ptx::mbarrier_wait_parity(&s.full[i], 0u);
  };

  // 1. Validate every id (the plan kernel's rules and report: the first bad
  //    pair); with a bad id no CTA writes anything. The repeat check reads
  //    other slots: from shared memory, not as a chain of dependent global
  //    loads.
  s.ids[tid] = id;
  if (tid == 0) {
    s.bad_pair = INT32_MAX;
    s.scale_mul = kScaleCodeMul;
  }
  __syncthreads();
  if (tid < pairs) {
    if (id < 0 || id >= p.num_experts) {
      atomicMin(&s.bad_pair, tid);
    } else {
      for (int32_t j = tid - tid % p.top_k; j < tid; ++j)
        if (s.ids[j] == id) atomicMin(&s.bad_pair, tid);
    }
  }
  __syncthreads();
  if (s.bad_pair != INT32_MAX) {
    if (reporter) {
      const int32_t b = s.bad_pair, e = s.ids[b];
      *p.status = {e < 0 || e >= p.num_experts ? kPlanIdOutOfRange : kPlanDuplicateId, b / p.top_k, b % p.top_k, e};
      // An overlapping grid must not finish before the kernel it overlaps
      // (the next kernel in the stream waits for this one only): CTA (0, 0)
      // always waits, here or before its K loop (pair 0 always works when
      // the ids are good).
      if (p.overlaps_previous) ptx::grid_dependency_wait();
    }
    drain_early_copies();
    return;
  }
  if (reporter) *p.status = {kPlanOk, 0, 0, 0};

  // 2. Only the pair that opens a row group of its expert works: the
  //    expert's pairs first_row, +kStreamCtaRows are this CTA's rows (up
  //    to T = 8 one group, the expert's first pair).
  const int32_t expert = s.ids[me];
  const int32_t first_row = kRowGroups ? __syncthreads_count(tid < me && id == expert) : 0;
  if (kRowGroups ? first_row % kStreamCtaRows != 0 : __syncthreads_or(tid < me && id == expert)) {
    drain_early_copies();
    return;
  }
  const uint8_t* w0 = weights_of(expert);
  if (producer) {
    // The row group's pairs, ascending, found by the producer warp alone
    // (so that its first copies wait for no other warp): lane n < num_rows
    // takes the group's n-th, whose activation row it copies.
    int32_t num_rows = 0, my_pair = 0;
    for (int32_t base = 0; base < pairs; base += 32) {
      const uint32_t hits = __ballot_sync(0xFFFFFFFFu, base + lane < pairs && s.ids[base + lane] == expert);
      const int32_t nth = first_row + lane - num_rows, count = __popc(hits);
      if (nth >= 0 && nth < count) my_pair = base + int32_t(__fns(hits, 0, nth + 1));
      num_rows += count;
    }
    num_rows = min(num_rows - first_row, kStreamCtaRows);
    const uint16_t* x_row = p.x ? p.x + pair_row(p.x_map, my_pair, p.top_k) * p.x_stride + kb_begin * 64 : nullptr;
    // Launched to overlap the previous kernel, whose output the activation
    // rows are (the layer's h): everything before their copies reads only
    // earlier inputs.
    stream_stages<kChunks>(s, ring, num_stages, stage_bytes, w0, k_blocks, all_k_blocks, x_row,
                           staged_pitch ? 0 : num_rows, p.overlaps_previous, posted);
    return;  // the CTA, and with it the ring, lives until the consumers finish
  }

  // 3. The row group's pairs, ascending (ballot per warp, then warp order).
  const bool hit = tid < pairs && id == expert;
  const uint32_t ballot = __ballot_sync(0xFFFFFFFFu, hit);
  if (lane == 0) s.warp_hits[warp] = __popc(ballot);
  ptx::named_barrier_sync(kConsumerBarrier, kThreads);
  int32_t num_rows = 0, pos = __popc(ballot & ((1u << lane) - 1u));
  for (int w = 0; w < kThreads / 32; ++w) {
    if (w < warp) pos += s.warp_hits[w];
    num_rows += s.warp_hits[w];
  }
  num_rows = min(num_rows - first_row, kStreamCtaRows);
  if (hit && (!kRowGroups || pos >= first_row) && pos < first_row + kStreamCtaRows) s.pair_of[pos - first_row] = tid;
  ptx::named_barrier_sync(kConsumerBarrier, kThreads);
  if (tid < num_rows) {
    const int32_t pr = s.pair_of[tid];
    s.rows[tid] = {pair_row(p.y_map, pr, p.top_k), p.route_w ? p.route_w[pr] : 1.0f};
  }
  // No write but the status word before the previous kernel ends.
  if (p.overlaps_previous) ptx::grid_dependency_wait();
  // Small batches' rows (streamer_staged_rows): staged whole after the ring
  // by the consumers while the producer's first stages stream; a single
  // F32 row is rounded to BF16 on the way, instead of by a conversion
  // kernel first (host: streamer_activations).
  if (staged_pitch) {
    if (early_x) drain_early_copies();
    else if (p.x_f32) stage_f32_row(p, s.pair_of[0], kb_begin * 64, k_blocks * 64, reinterpret_cast<uint32_t*>(staged));
    else stage_bf16_rows(p, s.pair_of, num_rows, kb_begin * 64, k_blocks, staged, staged_pitch);
    ptx::named_barrier_sync(kConsumerBarrier, kThreads);
  }

  // 4. Consume the ring: warp (wn, wk) dequantizes K blocks wk, wk + kWarpsK
  //    of each stage for its 16 rows, against the stage's activation rows.
  const int wn = warp % C::kWarpsN, wk = warp / C::kWarpsN;
  const int chunk = wn / 4, t = (wn % 4) * 32 + lane;  // t: thread index inside the chunk's fragment
  const int g = lane / 4, q = lane % 4;
  // Shared addresses the loop carries from stage to stage (this thread's
  // fragment of the stage's K block wk, the stage's full barrier, the B
  // fragments of K block kb). NOTES: derived from the slot index, ptxas
  // rematerialized them in every iteration from SR_CgaCtaId and the thread
  // index (SASS at 678a741: an S2UR after the full-barrier wait and ~10
  // address instructions before the fragment loads, 177 instructions per
  // iteration; 171 now); a value the loop carries cannot be rematerialized.
  // A/B at 678a741: decode 1.011x geomean in a graph, up to 1.03x at T = 4
  // (bench/results/2026-12-01-h200-ab-loop-carried-shared-addresses.json).
  // The same change in the GEMM's consumers (185 -> 181 instructions per
  // narrow iteration) ran 0.97-1.01x there, so it is not in the GEMM.
  const FragmentRef f0 = fragment_ref(ring + (chunk * C::kStageBlocks + wk) * kSm90ChunkBytes, t);
  uint32_t codes_at = ptx::smem_addr(f0.codes), scales_at = ptx::smem_addr(f0.scales);
  uint32_t full_at = ptx::smem_addr(&s.full[0]);
  const uint32_t empty_from_full = ptx::smem_addr(&s.empty[0]) - full_at;
  const uint32_t ring_back = uint32_t(num_stages - 1) * stage_bytes;
  // ldmatrix rows: lane 8m + j passes row j (a token; past the expert's rows
  // its first row again, whose output columns are never stored) at k offset
  // 8m of two k16 steps of this warp's K block.
  // A staged row advances by a stage's K and never wraps.
  const int x_row = lane % 8 < num_rows ? lane % 8 : 0;
  const uint32_t x_in_block = wk * 128 + (lane / 8) * 16;
  uint32_t x_at = staged_pitch ? ptx::smem_addr(staged) + x_row * staged_pitch + x_in_block
                               : ptx::smem_addr(ring) + C::kWeightBytes + x_row * C::kXPitch + x_in_block;
  const uint32_t x_step = staged_pitch ? uint32_t(C::kStageBlocks * 128) : stage_bytes;
  const uint32_t x_back = staged_pitch ? 0u - x_step : ring_back;
  int32_t kb = wk;
  // Two accumulator chains (even, odd k16 steps): back-to-back mma on one
  // accumulator would wait out each other's latency.
  float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  const uint32_t scale_mul = s.scale_mul;  // dequant.cuh: kept in a register through the loop
  PipelineState ps;
  // One stage: wait, load this warp's two fragments and their B fragments,
  // release, then dequantize and multiply them. kLast: the stage may hold
  // fewer than kStageBlocks K blocks (an odd K's end), so each fragment is
  // checked against k_blocks; the full stages run without those checks.
  const auto stage = [&](auto last) {
    constexpr bool kLast = decltype(last)::value;
    ptx::mbarrier_wait_parity(full_at, ps.phase);
    uint4 codes[2];
    uint2 scales[2];
    uint4 b[2][2];  // two k16 steps' B fragments per ldmatrix
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      codes[u] = ptx::ld_shared_v4(codes_at + u * kWarpsK * kSm90ChunkBytes);
      scales[u] = ptx::ld_shared_v2(scales_at + u * kWarpsK * kSm90ChunkBytes);
      if (!kLast || kb + u * kWarpsK < k_blocks) {
        // Two k16 steps per load. NOTES: on the fragment-order staging before
        // the ring, one LDS.64 per step (16b204b) was 4 more of a stage's
        // ~158 instructions; two steps per LDS.128 ran decode 1.025x geomean
        // (H200 A/B, bench/results/2026-12-03-h200-ab-streamer-b-pairs-and-stage-pairs.json).
#pragma unroll
        for (int pair = 0; pair < 2; ++pair) b[u][pair] = ptx::ldmatrix_x4(x_at + u * kWarpsK * 128 + pair * 64);
      }
    }
    // Every thread releases the slot after its own loads, as in the GEMM
    // mainloop (nvfp4_grouped_gemm.cuh says why, and what it costs), so that
    // the refill of weights and rows waits for no mma.
    // NOTES: with the rows released by a second barrier after the stage's
    // mma (53d76d2), their refill waited for the compute: T = 1-4 ran
    // 0.92-0.99x of the staged rows before it, deepseek's gate_up T = 1
    // 0.84x (bench/results/2026-12-03-h200-ab-ring-x-producer-fixes.json).
    // Releasing after the weight loads alone let the refill overwrite rows
    // still to be read (4 GPU tests failed). With one release after every
    // load, ptxas moved it behind the first fragment's mma.
    ptx::mbarrier_arrive(full_at + empty_from_full);
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if (!kLast || kb + u * kWarpsK < k_blocks) {
        uint32_t a[4][4];
        dequant_fragment(codes[u], scales[u], scale_mul, a);
#pragma unroll
        for (int pair = 0; pair < 2; ++pair) {
          ptx::mma_m16n8k16_bf16(acc[0], a[2 * pair], b[u][pair].x, b[u][pair].y);
          ptx::mma_m16n8k16_bf16(acc[1], a[2 * pair + 1], b[u][pair].z, b[u][pair].w);
        }
      }
    }
    const bool wrap = ps.stage == num_stages - 1;
    ps.advance(num_stages);
    codes_at = wrap ? codes_at - ring_back : codes_at + stage_bytes;
    scales_at = wrap ? scales_at - ring_back : scales_at + stage_bytes;
    x_at = wrap ? x_at - x_back : x_at + x_step;
    constexpr uint32_t kBarrierBytes = sizeof(s.full[0]);
    full_at = wrap ? full_at - uint32_t(num_stages - 1) * kBarrierBytes : full_at + kBarrierBytes;
  };
  // NOTES: with the checks in every stage (ad0a47c) they cost two compares,
  // two branches and the K block count per ~170-instruction stage (SASS);
  // without them decode ran 1.031x geomean (H200 A/B,
  // bench/results/2026-12-03-h200-ab-streamer-full-stages-unchecked.json).
  // Two stages per ring step on even rings (f742f6d: one set of wrap
  // selects per pair, ~6 instructions a stage fewer) lost 1.4%, qwen3's
  // down up to 14% (same A/B as the LDS.128 note).
  const int32_t full_stages = k_blocks / C::kStageBlocks;
  for (int32_t it = 0; it < full_stages; ++it) stage(std::false_type{});
  kb += full_stages * C::kStageBlocks;
  if (full_stages * C::kStageBlocks < k_blocks) stage(std::true_type{});

  // 5. K partials -> tile (warp order, then with K splits the splits in
  //    order, then alpha), then the epilogue.
  const int row = chunk * 64 + (wn % 4) * 16 + g;
  s.partial[wk][2 * q][row] = acc[0][0] + acc[1][0];
  s.partial[wk][2 * q + 1][row] = acc[0][1] + acc[1][1];
  s.partial[wk][2 * q][row + 8] = acc[0][2] + acc[1][2];
  s.partial[wk][2 * q + 1][row + 8] = acc[0][3] + acc[1][3];
  ptx::named_barrier_sync(kConsumerBarrier, kThreads);
  const auto scaled = [&](float v, int r) {
    const float* alpha = (p.epilogue == EpilogueKind::kSwiGLU && r >= 64) ? p.alpha_up : p.alpha;
    return v * ((alpha ? alpha[expert] : 1.0f) * kWeightDownscale);
  };
  // Split s's raw sums of pair j, row n: stream_partial[(s * pairs + j) * n_total + n].
  const int64_t row0 = int64_t(blockIdx.x) * C::kRows;
  const auto partial_at = [&](int32_t split, int tok, int r) {
    return p.stream_partial + (int64_t(split) * pairs + s.pair_of[tok]) * p.n + row0 + r;
  };
  for (int i = tid; i < num_rows * C::kRows; i += kThreads) {
    const int tok = i / C::kRows, r = i % C::kRows;
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarpsK; ++w) v += s.partial[w][tok][r];
    if constexpr (kSplitK) *partial_at(int32_t(blockIdx.z), tok, r) = v;
    else s.tile[tok * C::kTileStride + r] = scaled(v, r);
  }
  if constexpr (kSplitK) {
    __threadfence();
    // The last split of this (row block, expert) to get here adds them all.
    // The fences order every thread's partial stores before the count, and
    // the count before the last CTA's loads.
    ptx::named_barrier_sync(kConsumerBarrier, kThreads);
    uint32_t* counter = p.stream_counters + int64_t(blockIdx.x) * pairs + me;
    if (tid == 0) {
      __threadfence();
      s.reduces = atomicAdd(counter, 1u) == uint32_t(splits - 1);
    }
    ptx::named_barrier_sync(kConsumerBarrier, kThreads);
    if (!s.reduces) return;
    __threadfence();
    for (int i = tid; i < num_rows * C::kRows; i += kThreads) {
      const int tok = i / C::kRows, r = i % C::kRows;
      float v = 0.0f;
      for (int32_t split = 0; split < splits; ++split) v += __ldcg(partial_at(split, tok, r));
      s.tile[tok * C::kTileStride + r] = scaled(v, r);
    }
    if (tid == 0) *counter = 0u;  // no other CTA of this launch touches it again
  }
  ptx::named_barrier_sync(kConsumerBarrier, kThreads);
  const WorkTile w{expert, 0, num_rows, 0, int32_t(blockIdx.x), 0, 0, k_blocks};
  epilogue_store<kChunks, kThreads>(p, w, s.tile, C::kTileStride, s.rows, tid);
}

template <int kChunks, bool kSplitK, int kCtasPerSm, bool kRowGroups>
Status launch_stream(const GemmParams& p, const StreamerLaunchShape& shape, cudaStream_t stream, LaunchOrder order) {
  const int32_t pairs = p.num_tokens * p.top_k;
  const dim3 grid(uint32_t(p.n / (64 * kChunks)), uint32_t(pairs), uint32_t(p.stream_splits));
  GemmParams q = p;
  q.overlaps_previous = order == LaunchOrder::kOverlapPrevious;
  const size_t smem = size_t(shape.stages) * shape.stage_bytes + shape.staged_bytes;
  auto kernel = weight_stream_kernel<kChunks, kSplitK, kCtasPerSm, kRowGroups>;
  NVFP4MOE_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  NVFP4MOE_CUDA_TRY(
      launch_kernel(kernel, grid, dim3(kAllThreads), smem, stream, order, q, shape.stages, uint32_t(shape.stage_bytes),
                    uint32_t(shape.staged_pitch)));
  NVFP4MOE_CUDA_CHECK_LAUNCH("weight_stream_kernel");
  return ok_status();
}

template <int kChunks, bool kSplitK>
Status launch_stream_occupancy(const GemmParams& p, int num_sms, cudaStream_t stream, LaunchOrder order) {
  const StreamerLaunchShape shape =
      weight_streamer_launch_shape(p.n, p.k, p.num_tokens, p.top_k, kChunks, p.stream_splits,
                                   streamer_staged_rows(p.num_tokens, p.k, p.x_f32 != nullptr), num_sms);
  if (streamer_row_groups(p.num_tokens)) {
    // No split instance: choose_stream_splits never splits row groups.
    if constexpr (kSplitK) return make_status(StatusCode::kInternal, "weight streamer K split at T = ", p.num_tokens);
    else return launch_stream<kChunks, false, 3, true>(p, shape, stream, order);
  }
  return shape.ctas_per_sm == 4 ? launch_stream<kChunks, kSplitK, 4, false>(p, shape, stream, order)
                                : launch_stream<kChunks, kSplitK, 3, false>(p, shape, stream, order);
}

template <bool kSplitK>
Status launch_stream_split(const GemmParams& p, int num_sms, cudaStream_t stream, LaunchOrder order) {
  return weight_streamer_chunks(p.epilogue == EpilogueKind::kSwiGLU, p.n, p.k, p.num_tokens, p.top_k, p.num_experts,
                                p.stream_splits, num_sms) == 2
             ? launch_stream_occupancy<2, kSplitK>(p, num_sms, stream, order)
             : launch_stream_occupancy<1, kSplitK>(p, num_sms, stream, order);
}

}  // namespace

int32_t choose_stream_splits(int64_t num_tokens, int64_t k) {
  const int64_t k_blocks = k / 64;
  if (streamer_row_groups(num_tokens)) return 1;
  if (const int64_t forced = forced_count("NVFP4MOE_STREAM_SPLITS"))  // experiments and tests only
    return splits_without_empty(k_blocks, std::min<int64_t>({forced, kMaxStreamSplits, k_blocks}));
  return 1;
}

// Four CTAs and their reservations within an SM's 228 KB of shared memory.
static_assert(4 * (kStreamFourCtaBytes + sizeof(StreamShared<2>) + 1024) <= 228 * 1024 &&
                  sizeof(StreamShared<1>) <= sizeof(StreamShared<2>),
              "four streamer CTAs per SM do not fit");

bool weight_streamer_four_per_sm(size_t stage_bytes, size_t staged_bytes, int64_t grid_ctas, int64_t num_tokens,
                                 int num_sms) {
  return num_tokens == 1 && staged_bytes > 0 && grid_ctas > 3 * int64_t(num_sms) &&
         staged_bytes + 3 * stage_bytes <= kStreamFourCtaBytes;
}

int weight_streamer_ctas_per_sm(size_t stage_bytes, size_t staged_bytes, int64_t grid_ctas, int64_t num_tokens,
                                int num_sms) {
  const bool three_forced = forced_count("NVFP4MOE_STREAM_CTAS_PER_SM") == 3;  // experiments and tests only
  if (!three_forced && weight_streamer_four_per_sm(stage_bytes, staged_bytes, grid_ctas, num_tokens, num_sms))
    return 4;
  if (grid_ctas > 2 * int64_t(num_sms) && staged_bytes + 4 * stage_bytes <= kStreamSmallCtaBytes) return 3;
  return 2;
}

int weight_streamer_stages(size_t stage_bytes, size_t staged_bytes, int ctas_per_sm) {
  const size_t budget = ctas_per_sm == 4   ? kStreamFourCtaBytes
                        : ctas_per_sm == 3 ? kStreamSmallCtaBytes
                                           : kStreamTwoCtaBytes;
  return int(std::min<size_t>(kMaxStages, (budget - std::min(budget, staged_bytes)) / stage_bytes));
}

StreamerLaunchShape weight_streamer_launch_shape(int64_t n, int64_t k, int64_t num_tokens, int64_t top_k,
                                                 int32_t chunks, int32_t splits, int64_t staged_rows, int num_sms) {
  StreamerLaunchShape shape;
  shape.ctas = weight_streamer_ctas(n, chunks, num_tokens, top_k) * splits;
  shape.split_blocks = (k / 64 + splits - 1) / splits;
  shape.stage_bytes = weight_streamer_stage_bytes(chunks, staged_rows ? 0 : num_tokens);
  shape.staged_pitch = staged_rows ? weight_streamer_staged_pitch(shape.split_blocks) : 0;
  shape.staged_bytes = size_t(staged_rows) * shape.staged_pitch;
  shape.ctas_per_sm =
      weight_streamer_ctas_per_sm(shape.stage_bytes, shape.staged_bytes, shape.ctas, num_tokens, num_sms);
  shape.stages = weight_streamer_stages(shape.stage_bytes, shape.staged_bytes, shape.ctas_per_sm);
  return shape;
}

bool streamer_overlap_pays(int64_t n, int64_t k, int64_t num_tokens, int64_t top_k, int64_t num_experts,
                           int num_sms) {
  const int32_t splits = choose_stream_splits(num_tokens, k);
  const int32_t chunks = weight_streamer_chunks(false, n, k, num_tokens, top_k, num_experts, splits, num_sms);
  const StreamerLaunchShape shape =
      weight_streamer_launch_shape(n, k, num_tokens, top_k, chunks, splits,
                                   streamer_staged_rows(num_tokens, k, false), num_sms);
  if (shape.ctas > num_sms) return true;
  const size_t slab = size_t(chunks) * size_t(shape.split_blocks) * kSm90ChunkBytes;
  return slab <= size_t(shape.stages) * kStreamStageWeightBytes;
}

Status launch_weight_streamer(const GemmParams& p, int num_sms, cudaStream_t stream, LaunchOrder order) {
  const int64_t pairs = int64_t(p.num_tokens) * p.top_k;
  if (p.num_tokens < 1 || p.num_tokens > kStreamKernelMaxTokens || pairs > kThreads)
    return make_status(StatusCode::kInternal, "weight streamer called with T = ", p.num_tokens, ", k = ", p.top_k);
  if (!p.ids || !p.status || (!p.x && !p.x_f32) || (p.x_f32 && !streamer_stages_f32_row(p.num_tokens, p.k)) ||
      p.k_splits != 1 ||
      p.y_map == RowMap::kCompact || p.x_map == RowMap::kCompact)
    return make_status(StatusCode::kInternal, "weight streamer parameters are incomplete");
  if (p.epilogue == EpilogueKind::kSwiGLU && p.n % 128 != 0)
    return make_status(StatusCode::kInternal, "SwiGLU streamer needs N % 128 == 0, N = ", p.n);
  const int32_t k_blocks = p.k / 64;
  if (p.stream_splits < 1 || p.stream_splits > k_blocks ||
      (p.stream_splits > 1 && (!p.stream_partial || !p.stream_counters ||
                               (k_blocks + p.stream_splits - 1) / p.stream_splits * (p.stream_splits - 1) >= k_blocks)))
    return make_status(StatusCode::kInternal, "weight streamer K split of ", p.stream_splits, " over ", k_blocks,
                       " K blocks without its workspace, or with an empty split");
  return p.stream_splits > 1 ? launch_stream_split<true>(p, num_sms, stream, order)
                            : launch_stream_split<false>(p, num_sms, stream, order);
}

}  // namespace nvfp4moe::cuda
