// Weight streamer: MUL_MAT_ID for small batches (T <= kStreamKernelMaxTokens).
//
// At decode sizes the op is a read of the hit experts' weights; a routing
// plan (one more launch, ~7 us) and wgmma tiles sized for many tokens only
// add latency. Here the kernel plans for itself:
//   grid  = (64-row blocks of N / kChunks) x (T*k pairs);
//   a CTA reads all ids (<= 8 * 32), validates them exactly like the plan
//   kernel, and works only if its pair is the first one routed to its expert,
//   so every hit expert's weights are read once; it gathers that expert's
//   pairs (<= T <= 8 rows, ascending) as the n8 columns of mma.sync.
// Warps: one producer warp streams the CTA's weights (its kChunks 64-row
// chunks are contiguous along K in the sm90 layout) into a ring of shared
// memory stages with 1-D bulk copies (launch.hpp sizes the ring).
// NOTES: the first versions loaded the fragments into registers (~37 KB in
// flight per SM). The ring alone did not make it faster (bytes in flight
// were not the limit, launch.hpp), but it leaves each thread at 60
// registers, so three CTAs fit on an SM. The 8 consumer warps are 4 * kChunks
// along N (16 weight rows each: the sm90 fragment layout is one warp's mma
// A fragment) times the rest along K (K blocks dealt round robin inside each
// stage). The expert's activation rows are staged once in shared memory as
// BF16 B fragments (one LDS.128 per two k16 steps, zeros past its rows): BF16 x
// by cp.async, all in flight at once; F32 x (as ggml passes it) at T = 1
// through registers, and from T = 2 converted to BF16 by a kernel that the
// streamer overlaps (streamer_converts_f32, launch.hpp).
// The K partial sums meet in shared memory and are added in warp order,
// then the shared epilogue (alpha, SwiGLU on gate/up chunk pairs, router
// weight, F32/BF16 store) writes the rows.
// K split (p.stream_splits > 1, blockIdx.z = split; choose_stream_splits,
// launch.hpp): where a long K's staged activation rows would leave an SM
// to one CTA, each CTA takes one contiguous K range and stages only its
// rows. It writes its raw sums to p.stream_partial; the last CTA of its
// (row block, expert) to finish, by a counter in p.stream_counters, adds the
// splits in split order and runs the epilogue, then rewinds the counter for
// the next launch.
// Summation order differs from the wgmma path (a different K split), so
// outputs agree with it to fp32 rounding, not bit for bit; for a given
// input and split count they are the same on every run and do not depend on
// the other tokens' routing (each output row's order is fixed). The split
// count is a function of K and T.
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
  static constexpr int kStageBytes = kChunks * kStageBlocks * kSm90ChunkBytes;
};
static_assert(StreamConfig<1>::kStageBytes == kStreamStageBytes && StreamConfig<2>::kStageBytes == kStreamStageBytes,
              "launch.hpp sizes the ring with kStreamStageBytes");

template <int kChunks>
struct StreamShared {
  using C = StreamConfig<kChunks>;
  float partial[C::kWarpsK][kStreamKernelMaxTokens][C::kRows];
  float tile[kStreamKernelMaxTokens * C::kTileStride];
  EpilogueRows rows[kStreamKernelMaxTokens];
  int32_t pair_of[kStreamKernelMaxTokens];  // the expert's pairs, ascending
  int32_t warp_hits[kAllThreads / 32];
  int32_t ids[kAllThreads];  // every id of the call (T * k <= kThreads)
  int32_t bad_pair;
  int32_t reduces;     // this CTA finished its (row block, expert) last: it adds the splits
  uint32_t scale_mul;  // kScaleCodeMul
  uint64_t full[kMaxStages];
  uint64_t empty[kMaxStages];
};

// The activation or output row of a pair (the streamer has no sorted order).
__device__ __forceinline__ int64_t pair_row(RowMap map, int32_t pair, int32_t top_k) {
  return map == RowMap::kToken ? pair / top_k : pair;
}

// Columns (token rows) the staged B fragments hold: rows of one expert
// (<= T), rounded up to a power of two.
__host__ __device__ __forceinline__ int32_t staged_columns(int32_t num_tokens) {
  int32_t r = 1;
  while (r < num_tokens) r *= 2;
  return r;
}

// Word j (k = 2 j, 2 j + 1) of staged column n, in mma B-fragment order:
// step s = j / 8, q = j % 4, hi = (j / 4) % 2, two steps side by side.
__device__ __forceinline__ int32_t staged_word(int32_t j, int32_t n, int32_t cols) {
  const int32_t s = j / 8;
  return (((s / 2) * cols + n) * 4 + j % 4) * 4 + (s % 2) * 2 + (j / 4) % 2;
}

// x rows of the expert, K positions [k0, k0 + k_len) -> shared memory (by the
// consumer threads), BF16, in mma B-fragment order: u32 index
// (((s / 2) * cols + n) * 4 + q) * 4 + (s % 2) * 2 + hi holds
// k = k0 + 16 s + 2 q + 8 hi (+1) of column n, so lane (g, q) reads its
// b0, b1 of steps s and s + 1 (s even) as one 16-byte word. Columns past
// num_rows are zeros.
template <int kCols>
__device__ __forceinline__ void stage_b_fragments(const GemmParams& p, const int32_t* pair_of, int32_t num_rows,
                                                  int32_t k0, int32_t k_len, uint32_t* xs) {
  const int32_t half_k = k_len / 2;
  if constexpr (kCols == 1) {
    if (p.x_f32) {
      // One F32 row (T = 1, streamer_converts_f32): rounded through
      // registers, 8 float4 loads in flight per thread before the stores;
      // indices are never divided by K (ncu at 3d8f74f: the division of a
      // flat index was the staging loop's hottest code).
      constexpr int kPerThread = 8;
      const int32_t quarter_k = k_len / 4;
      const float* xf = p.x_f32 + (num_rows > 0 ? pair_row(p.x_map, pair_of[0], p.top_k) * p.x_stride : 0) + k0;
      for (int32_t base = threadIdx.x; base < quarter_k; base += kPerThread * kThreads) {
        uint32_t v[kPerThread][2];
#pragma unroll
        for (int u = 0; u < kPerThread; ++u) {
          const int32_t i = base + u * kThreads;  // float4 i: words 2 i, 2 i + 1
          v[u][0] = v[u][1] = 0u;
          if (num_rows > 0 && i < quarter_k) {
            const float4 f = *reinterpret_cast<const float4*>(xf + 4 * i);
            v[u][0] = ptx::pack_bf16x2_rn(f.x, f.y);
            v[u][1] = ptx::pack_bf16x2_rn(f.z, f.w);
          }
        }
#pragma unroll
        for (int u = 0; u < kPerThread; ++u) {
          const int32_t i = base + u * kThreads;
          if (i < quarter_k) {
            xs[staged_word(2 * i, 0, kCols)] = v[u][0];
            xs[staged_word(2 * i + 1, 0, kCols)] = v[u][1];
          }
        }
      }
      return;
    }
  }
  // BF16: 4-byte asynchronous copies straight into fragment order, every
  // column's words in flight at once. NOTES: through registers, one L2
  // round trip per column and batch of 8 words in a row (at T = 4 four to
  // eight, while the producer's ring sits full), T = 2-4 ran 1.07-1.24x
  // slower (bench/results/2026-12-01-h200-ab-stream-x-cp-async.json).
  // Word j + kThreads lands kThreads * kCols words after word j (staged_word:
  // j % 16 is the thread's own), so each thread steps a pointer.
  static_assert(kThreads % 16 == 0, "a thread keeps its words' place inside their two steps");
  for (int32_t n = 0; n < kCols; ++n) {
    const bool real = n < num_rows;
    const uint16_t* xb = real ? p.x + pair_row(p.x_map, pair_of[n], p.top_k) * p.x_stride + k0 : nullptr;
    uint32_t* dst = xs + staged_word(int32_t(threadIdx.x), n, kCols);
    for (int32_t j = threadIdx.x; j < half_k; j += kThreads, dst += kThreads * kCols) {
      if (real) ptx::cp_async_4(dst, xb + 2 * j);
      else *dst = 0u;
    }
  }
  ptx::cp_async_wait_all();
}

// Producer: the CTA's weight slab, stage after stage, into the ring: k_blocks
// K blocks from w0 in each of its chunks, chunk_stride K blocks apart.
template <int kChunks>
__device__ void stream_weights(StreamShared<kChunks>& s, uint8_t* ring, int num_stages,
                               const uint8_t* w0, int32_t k_blocks, int32_t chunk_stride) {
  using C = StreamConfig<kChunks>;
  const int32_t iters = (k_blocks + C::kStageBlocks - 1) / C::kStageBlocks;
  PipelineState ps;
  for (int32_t it = 0; it < iters; ++it, ps.advance(num_stages)) {
    const int slot = ps.stage;
    ptx::mbarrier_wait_parity(&s.empty[slot], ps.phase ^ 1u);
    // The consumers read the slot with ld.shared (generic proxy); the copy
    // writes it through the async proxy (ptx/sync.cuh). NOTES: without this
    // fence, qwen3's down at T = 8 (six fills of five slots) gave other bits
    // in 1-10 of 63 repeated launches, in 7 of 7 runs, once the F32 staging
    // got faster: 8-16 outputs of one of a CTA's first two warps, whose
    // fragments open the slot that the refill writes first
    // (GpuMulMatId.RepeatedLaunchesGiveTheSameBits,
    // bench/results/2026-12-01-h200-356172a-ring-refill-fence-repeat.json).
    ptx::fence_proxy_async_shared();
    const int32_t kb0 = it * C::kStageBlocks, blocks = min(C::kStageBlocks, k_blocks - kb0);
    const uint32_t bytes = uint32_t(blocks) * kSm90ChunkBytes;
    ptx::mbarrier_arrive_expect_tx(&s.full[slot], kChunks * bytes);
    uint8_t* dst = ring + size_t(slot) * C::kStageBytes;
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
      ptx::bulk_copy_g2s(dst + c * C::kStageBlocks * kSm90ChunkBytes,
                         w0 + (int64_t(c) * chunk_stride + kb0) * kSm90ChunkBytes, bytes, &s.full[slot]);
  }
}

// kCols = staged_columns(T) is a template parameter so that every B
// fragment load of the main loop is one LDS at a constant offset (with a
// runtime column count, each cost three IMADs of address arithmetic).
// kSplitK: the K split's instance. NOTES: with the split as runtime code in
// every instance, the unsplit calls ran 1-4% slower (A/B at bc3fa33,
// bench/results/2026-11-30-h200-ab-bc3fa33-stream-k-split.json).
template <int kChunks, int kCols, bool kSplitK>
__global__ void __launch_bounds__(kAllThreads, 3) weight_stream_kernel(const __grid_constant__ GemmParams p,
                                                                        int num_stages) {
  using C = StreamConfig<kChunks>;
  constexpr int kWarpsK = C::kWarpsK;
  __shared__ StreamShared<kChunks> s;
  // The ring, then the staged activations (staged_columns(T) * K / 2 words).
  extern __shared__ __align__(128) uint8_t dyn[];
  uint8_t* ring = dyn;
  uint32_t* x_staged = reinterpret_cast<uint32_t*>(dyn + size_t(num_stages) * C::kStageBytes);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int32_t pairs = p.num_tokens * p.top_k, me = int32_t(blockIdx.y);
  const bool reporter = blockIdx.x == 0 && blockIdx.y == 0 && (!kSplitK || blockIdx.z == 0) && tid == 0;
  const bool producer = warp == kThreads / 32;
  // The next kernel of the layer (down after gate_up, the combine after
  // down) may start its ids check and weight stream beside this one.
  if (p.next_overlaps) ptx::launch_dependents();

  if (tid == 0) {
    for (int i = 0; i < num_stages; ++i) {
      ptx::mbarrier_init(&s.full[i], 1);
      ptx::mbarrier_init(&s.empty[i], kThreads);
    }
    ptx::fence_mbarrier_init();
  }

  // 1. Validate every id (the plan kernel's rules and report: the first bad
  //    pair); with a bad id no CTA writes anything, and none has started a
  //    copy yet. The repeat check reads other slots: from shared memory, not
  //    as a chain of dependent global loads.
  const int32_t id = tid < pairs ? p.ids[tid] : -1;  // pairs <= kThreads
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
      // always waits, here or before its staging (pair 0 always works when
      // the ids are good).
      if (p.overlaps_previous) ptx::grid_dependency_wait();
    }
    return;
  }
  if (reporter) *p.status = {kPlanOk, 0, 0, 0};

  // 2. Only the expert's first pair works.
  const int32_t expert = s.ids[me];
  if (__syncthreads_or(tid < me && id == expert)) return;

  // Rows [64 * kChunks * blockIdx.x, +kRows) x this split's K blocks
  // [kb_begin, +k_blocks) of the pair's expert.
  const int32_t all_k_blocks = p.k / 64, n_blocks = p.n / 64, splits = kSplitK ? int32_t(gridDim.z) : 1;
  const int32_t per_split = (all_k_blocks + splits - 1) / splits;
  const int32_t kb_begin = kSplitK ? int32_t(blockIdx.z) * per_split : 0;
  const int32_t k_blocks = min(all_k_blocks, kb_begin + per_split) - kb_begin;  // > 0: the host never splits emptily
  const uint8_t* w0 = p.w_packed + ((int64_t(expert) * n_blocks + int64_t(blockIdx.x) * kChunks) * all_k_blocks +
                                    kb_begin) * kSm90ChunkBytes;
  if (producer) {
    if (lane == 0) stream_weights<kChunks>(s, ring, num_stages, w0, k_blocks, all_k_blocks);
    return;  // the CTA, and with it the ring, lives until the consumers finish
  }

  // 3. The expert's pairs, ascending (ballot per warp, then warp order).
  const bool hit = tid < pairs && id == expert;
  const uint32_t ballot = __ballot_sync(0xFFFFFFFFu, hit);
  if (lane == 0) s.warp_hits[warp] = __popc(ballot);
  ptx::named_barrier_sync(kConsumerBarrier, kThreads);
  int32_t num_rows = 0, pos = __popc(ballot & ((1u << lane) - 1u));
  for (int w = 0; w < kThreads / 32; ++w) {
    if (w < warp) pos += s.warp_hits[w];
    num_rows += s.warp_hits[w];
  }
  num_rows = min(num_rows, kStreamKernelMaxTokens);  // the host keeps T <= kStreamKernelMaxTokens
  if (hit && pos < kStreamKernelMaxTokens) s.pair_of[pos] = tid;
  ptx::named_barrier_sync(kConsumerBarrier, kThreads);
  if (tid < num_rows) {
    const int32_t pr = s.pair_of[tid];
    s.rows[tid] = {pair_row(p.y_map, pr, p.top_k), p.route_w ? p.route_w[pr] : 1.0f};
  }
  // Launched to overlap the previous kernel, whose output the activations
  // are (the layer's h): everything before this reads only earlier inputs.
  if (p.overlaps_previous) ptx::grid_dependency_wait();
  stage_b_fragments<kCols>(p, s.pair_of, num_rows, kb_begin * 64, k_blocks * 64, x_staged);
  ptx::named_barrier_sync(kConsumerBarrier, kThreads);

  // 4. Consume the ring: warp (wn, wk) dequantizes K blocks wk, wk + kWarpsK
  //    of each stage for its 16 rows, against the staged columns.
  const int wn = warp % C::kWarpsN, wk = warp / C::kWarpsN;
  const int chunk = wn / 4, t = (wn % 4) * 32 + lane;  // t: thread index inside the chunk's fragment
  // Lanes past the staged columns read a staged column again: their output
  // columns are never stored.
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
  constexpr uint32_t kStepBytes = kCols * 4 * sizeof(uint2);  // one k16 step of B fragments (two are a uint4)
  const FragmentRef f0 = fragment_ref(ring + (chunk * C::kStageBlocks + wk) * kSm90ChunkBytes, t);
  uint32_t codes_at = ptx::smem_addr(f0.codes), scales_at = ptx::smem_addr(f0.scales);
  uint32_t full_at = ptx::smem_addr(&s.full[0]);
  const uint32_t empty_from_full = ptx::smem_addr(&s.empty[0]) - full_at;
  const uint32_t ring_back = uint32_t(num_stages - 1) * C::kStageBytes;
  uint32_t x_at = ptx::smem_addr(x_staged) + ((g % kCols) * 4 + q) * sizeof(uint4) + wk * 4 * kStepBytes;
  int32_t kb = wk;
  // Two accumulator chains (even, odd k16 steps): back-to-back mma on one
  // accumulator would wait out each other's latency.
  float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  const uint32_t scale_mul = s.scale_mul;  // dequant.cuh: kept in a register through the loop
  PipelineState ps;
  // One stage: wait, load this warp's two fragments, release, then dequantize
  // and multiply them. kLast: the stage may hold fewer than kStageBlocks K
  // blocks (an odd K's end), so each fragment is checked against k_blocks;
  // the full stages run without those checks.
  const auto stage = [&](auto last) {
    constexpr bool kLast = decltype(last)::value;
    ptx::mbarrier_wait_parity(full_at, ps.phase);
    uint4 codes[2];
    uint2 scales[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      codes[u] = ptx::ld_shared_v4(codes_at + u * kWarpsK * kSm90ChunkBytes);
      scales[u] = ptx::ld_shared_v2(scales_at + u * kWarpsK * kSm90ChunkBytes);
    }
    // Every thread releases the slot after its own loads, as in the GEMM
    // mainloop (nvfp4_grouped_gemm.cuh says why, and what it costs).
    ptx::mbarrier_arrive(full_at + empty_from_full);
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if (!kLast || kb + u * kWarpsK < k_blocks) {
        uint32_t a[4][4];
        dequant_fragment(codes[u], scales[u], scale_mul, a);
        const uint32_t xk = x_at + u * kWarpsK * 4 * kStepBytes;
        // NOTES: one LDS.64 per step (16b204b) was 4 more of a stage's ~158
        // instructions; this ran decode 1.025x geomean (H200 A/B,
        // bench/results/2026-12-03-h200-ab-streamer-b-pairs-and-stage-pairs.json).
#pragma unroll
        for (int step = 0; step < 4; step += 2) {
          const uint4 b = ptx::ld_shared_v4(xk + step * kStepBytes);
          ptx::mma_m16n8k16_bf16(acc[0], a[step], b.x, b.y);
          ptx::mma_m16n8k16_bf16(acc[1], a[step + 1], b.z, b.w);
        }
      }
    }
    const bool wrap = ps.stage == num_stages - 1;
    ps.advance(num_stages);
    codes_at = wrap ? codes_at - ring_back : codes_at + C::kStageBytes;
    scales_at = wrap ? scales_at - ring_back : scales_at + C::kStageBytes;
    constexpr uint32_t kBarrierBytes = sizeof(s.full[0]);
    full_at = wrap ? full_at - uint32_t(num_stages - 1) * kBarrierBytes : full_at + kBarrierBytes;
    x_at += C::kStageBlocks * 4 * kStepBytes;
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

template <int kChunks, int kCols, bool kSplitK>
Status launch_stream(const GemmParams& p, int num_sms, cudaStream_t stream, LaunchOrder order) {
  const int32_t pairs = p.num_tokens * p.top_k;
  const dim3 grid(uint32_t(p.n / (64 * kChunks)), uint32_t(pairs), uint32_t(p.stream_splits));
  const StreamerLaunchShape shape =
      weight_streamer_launch_shape(p.n, p.k, p.num_tokens, p.top_k, kChunks, p.stream_splits, num_sms);
  GemmParams q = p;
  q.overlaps_previous = order == LaunchOrder::kOverlapPrevious;
  const size_t smem = size_t(shape.stages) * kStreamStageBytes + shape.staged_bytes;
  auto kernel = weight_stream_kernel<kChunks, kCols, kSplitK>;
  NVFP4MOE_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  NVFP4MOE_CUDA_TRY(launch_kernel(kernel, grid, dim3(kAllThreads), smem, stream, order, q, shape.stages));
  NVFP4MOE_CUDA_CHECK_LAUNCH("weight_stream_kernel");
  return ok_status();
}

template <int kChunks, bool kSplitK>
Status launch_stream_chunks(const GemmParams& p, int num_sms, cudaStream_t stream, LaunchOrder order) {
  static_assert(kStreamKernelMaxTokens == 8, "one instantiation per staged column count 1, 2, 4, 8");
  switch (staged_columns(p.num_tokens)) {
    case 1: return launch_stream<kChunks, 1, kSplitK>(p, num_sms, stream, order);
    case 2: return launch_stream<kChunks, 2, kSplitK>(p, num_sms, stream, order);
    case 4: return launch_stream<kChunks, 4, kSplitK>(p, num_sms, stream, order);
    default: return launch_stream<kChunks, 8, kSplitK>(p, num_sms, stream, order);
  }
}

template <bool kSplitK>
Status launch_stream_split(const GemmParams& p, int num_sms, cudaStream_t stream, LaunchOrder order) {
  return weight_streamer_chunks(p.epilogue == EpilogueKind::kSwiGLU, p.n, p.k, p.num_tokens, p.top_k,
                                p.stream_splits, num_sms) == 2
             ? launch_stream_chunks<2, kSplitK>(p, num_sms, stream, order)
             : launch_stream_chunks<1, kSplitK>(p, num_sms, stream, order);
}

Status launch_stream_for_columns(const GemmParams& p, int num_sms, cudaStream_t stream, LaunchOrder order) {
  return p.stream_splits > 1 ? launch_stream_split<true>(p, num_sms, stream, order)
                             : launch_stream_split<false>(p, num_sms, stream, order);
}

}  // namespace

size_t weight_streamer_staged_bytes(int64_t num_tokens, int64_t k) {
  return size_t(staged_columns(int32_t(std::min<int64_t>(num_tokens, kStreamKernelMaxTokens)))) * size_t(k) * 2;
}

int32_t choose_stream_splits(int64_t num_tokens, int64_t k) {
  const int64_t k_blocks = k / 64;
  if (const int64_t forced = forced_splits("NVFP4MOE_STREAM_SPLITS"))  // experiments only
    return splits_without_empty(k_blocks, std::min<int64_t>({forced, kMaxStreamSplits, k_blocks}));
  const auto fits = [&](int64_t splits, size_t budget) {
    const int64_t split_k = (k_blocks + splits - 1) / splits * 64;
    return weight_streamer_staged_bytes(num_tokens, split_k) + 2 * kStreamStageBytes <= budget;
  };
  if (fits(1, kStreamTwoCtaBytes)) return 1;
  for (int64_t splits = 2; splits <= std::min<int64_t>(kMaxStreamSplits, k_blocks); ++splits)
    if (fits(splits, kStreamTwoCtaBytes)) return splits_without_empty(k_blocks, splits);
  return 1;
}

int weight_streamer_stages(size_t staged_bytes, int64_t grid_ctas, int num_sms) {
  const auto fits = [&](size_t budget) { return staged_bytes + 2 * kStreamStageBytes <= budget; };
  size_t budget = kStreamOneCtaBytes;
  if (grid_ctas > 2 * int64_t(num_sms) && fits(kStreamSmallCtaBytes)) budget = kStreamSmallCtaBytes;
  else if (fits(kStreamTwoCtaBytes)) budget = kStreamTwoCtaBytes;
  return int(std::min<size_t>(kMaxStages, (budget - std::min(budget, staged_bytes)) / kStreamStageBytes));
}

StreamerLaunchShape weight_streamer_launch_shape(int64_t n, int64_t k, int64_t num_tokens, int64_t top_k,
                                                 int32_t chunks, int32_t splits, int num_sms) {
  StreamerLaunchShape shape;
  shape.ctas = weight_streamer_ctas(n, chunks, num_tokens, top_k) * splits;
  shape.split_blocks = (k / 64 + splits - 1) / splits;
  shape.staged_bytes = weight_streamer_staged_bytes(num_tokens, shape.split_blocks * 64);
  shape.stages = weight_streamer_stages(shape.staged_bytes, shape.ctas, num_sms);
  return shape;
}

bool streamer_overlap_pays(int64_t n, int64_t k, int64_t num_tokens, int64_t top_k, int num_sms) {
  const int32_t splits = choose_stream_splits(num_tokens, k);
  const int32_t chunks = weight_streamer_chunks(false, n, k, num_tokens, top_k, splits, num_sms);
  const StreamerLaunchShape shape = weight_streamer_launch_shape(n, k, num_tokens, top_k, chunks, splits, num_sms);
  if (shape.ctas > num_sms) return true;
  const size_t slab = size_t(chunks) * size_t(shape.split_blocks) * kSm90ChunkBytes;
  return slab <= size_t(shape.stages) * kStreamStageBytes;
}

Status launch_weight_streamer(const GemmParams& p, int num_sms, cudaStream_t stream, LaunchOrder order) {
  const int64_t pairs = int64_t(p.num_tokens) * p.top_k;
  if (p.num_tokens < 1 || p.num_tokens > kStreamKernelMaxTokens || pairs > kThreads ||
      weight_streamer_staged_bytes(p.num_tokens, p.k) > kStreamMaxStagedBytes)
    return make_status(StatusCode::kInternal, "weight streamer called with T = ", p.num_tokens, ", k = ", p.top_k);
  if (!p.ids || !p.status || (!p.x && !p.x_f32) || (p.x_f32 && p.num_tokens != 1) || p.k_splits != 1 ||
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
  return launch_stream_for_columns(p, num_sms, stream, order);
}

}  // namespace nvfp4moe::cuda
