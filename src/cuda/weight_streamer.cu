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
// Warps: 4 * kChunks along N (16 weight rows each, the sm90 fragment layout
// is one warp's mma A fragment), the rest along K (k64 blocks dealt round
// robin). Each warp double-buffers kUnroll fragments of global loads, so
// ~4.6 KB per warp are in flight. The expert's activation rows are staged
// once in shared memory as BF16 B fragments (one LDS.64 per k16 step, zeros
// past its rows): NOTES: the first version loaded them from global memory
// beside each mma, and every mma waited on that load (1.3 TB/s on H200).
// The K partial sums meet in shared memory and are added in warp order,
// then the shared epilogue (alpha, SwiGLU on gate/up chunk pairs, router
// weight, F32/BF16 store) writes the rows.
// Summation order differs from the wgmma path (a different K split), so
// outputs agree with it to fp32 rounding, not bit for bit; for a given
// input they are the same on every run, and they do not depend on T or on
// the other tokens (each output row's order is fixed).
#include <algorithm>
#include <cstdint>

#include "cuda/check.hpp"
#include "cuda/dequant.cuh"
#include "cuda/epilogue.cuh"
#include "cuda/launch.hpp"
#include "cuda/plan_kernels.cuh"
#include "cuda/ptx/mma.cuh"

namespace nvfp4moe::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;

template <int kChunks>
struct StreamConfig {
  static constexpr int kWarpsN = 4 * kChunks;
  static constexpr int kWarpsK = kThreads / 32 / kWarpsN;
  static constexpr int kRows = 64 * kChunks;      // weight rows of the CTA
  static constexpr int kTileStride = kRows + 4;  // floats between token rows of the tile
};

template <int kChunks>
struct StreamShared {
  using C = StreamConfig<kChunks>;
  float partial[C::kWarpsK][kStreamKernelMaxTokens][C::kRows];
  float tile[kStreamKernelMaxTokens * C::kTileStride];
  EpilogueRows rows[kStreamKernelMaxTokens];
  int32_t pair_of[kStreamKernelMaxTokens];  // the expert's pairs, ascending
  int32_t warp_hits[kThreads / 32];
  int32_t ids[kThreads];  // every id of the call (T * k <= kThreads)
  int32_t bad_pair;
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

// x rows of the expert -> shared memory, BF16, in mma B-fragment order:
// u32 index ((s * cols + n) * 4 + q) * 2 + hi holds k = 16 s + 2 q + 8 hi
// (+1) of column n, so lane (g, q) reads its b0, b1 of step s as one
// 8-byte word. Columns past num_rows are zeros.
__device__ __forceinline__ void stage_b_fragments(const GemmParams& p, const int32_t* pair_of, int32_t num_rows,
                                                  int32_t cols, uint32_t* xs) {
  // kBatch loads in flight per thread before their stores: a loop that
  // stored each word right after its load waited one L2 latency per word.
  constexpr int kBatch = 8;
  const int32_t half_k = p.k / 2, total = cols * half_k;
  for (int32_t base = threadIdx.x; base < total; base += kBatch * blockDim.x) {
    uint32_t v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int32_t i = base + u * blockDim.x, n = i / half_k, k = 2 * (i % half_k);
      v[u] = 0;
      if (i < total && n < num_rows) {
        const int64_t row = pair_row(p.x_map, pair_of[n], p.top_k);
        if (p.x_f32) {
          const float2 f = *reinterpret_cast<const float2*>(p.x_f32 + row * p.x_stride + k);
          v[u] = ptx::pack_bf16x2_rn(f.x, f.y);
        } else {
          v[u] = *reinterpret_cast<const uint32_t*>(p.x + row * p.x_stride + k);
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int32_t i = base + u * blockDim.x, n = i / half_k, k = 2 * (i % half_k);
      const int32_t step = k / 16, kk = k % 16;
      if (i < total) xs[((step * cols + n) * 4 + (kk % 8) / 2) * 2 + kk / 8] = v[u];
    }
  }
}

// Weights are read once: keep them out of L1.
__device__ __forceinline__ uint4 load_stream16(const uint8_t* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 load_stream8(const uint8_t* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

template <int kChunks>
__global__ void __launch_bounds__(kThreads, 2) weight_stream_kernel(const __grid_constant__ GemmParams p) {
  using C = StreamConfig<kChunks>;
  constexpr int kWarpsK = C::kWarpsK;
  __shared__ StreamShared<kChunks> s;
  extern __shared__ __align__(16) uint32_t x_staged[];  // staged_columns(T) * K / 2 words
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int32_t pairs = p.num_tokens * p.top_k, me = int32_t(blockIdx.y);
  const bool reporter = blockIdx.x == 0 && blockIdx.y == 0 && tid == 0;

  // The first loads go out before the ids are checked, so their latency
  // overlaps validation and staging; an out-of-range id loads nothing.
  // Rows [64 * kChunks * blockIdx.x, +kRows) x K of the pair's expert.
  const int32_t expert = p.ids[me];
  const bool expert_in_range = expert >= 0 && expert < p.num_experts;
  const int wn = warp % C::kWarpsN, wk = warp / C::kWarpsN;
  const int chunk = wn / 4, t = (wn % 4) * 32 + lane;  // t: thread index inside the chunk's fragment
  const int g = lane / 4, q = lane % 4;
  const int32_t k_blocks = p.k / 64, n_blocks = p.n / 64;
  const uint8_t* w0 = p.w_packed + (int64_t(expert_in_range ? expert : 0) * n_blocks +
                                    int64_t(blockIdx.x) * kChunks + chunk) * k_blocks * kSm90ChunkBytes;

  const int32_t cols = staged_columns(p.num_tokens);
  const bool col_valid = g < cols;
  const uint2* xs = reinterpret_cast<const uint2*>(x_staged) + g * 4 + q;  // + step * cols * 4
  // Two accumulator chains (even, odd k16 steps): back-to-back mma on one
  // accumulator would wait out each other's latency.
  float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
  uint4 codes[2][kUnroll];
  uint2 scales[2][kUnroll];
  auto load = [&](int buf, int32_t kb0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t kb = kb0 + u * kWarpsK;
      if (kb < k_blocks && expert_in_range) {
        const FragmentRef f = fragment_ref(w0 + int64_t(kb) * kSm90ChunkBytes, t);
        codes[buf][u] = load_stream16(f.codes);
        scales[buf][u] = load_stream8(f.scales);
      }
    }
  };
  auto compute = [&](int buf, int32_t kb0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t kb = kb0 + u * kWarpsK;
      if (kb < k_blocks) {
        uint32_t a[4][4];
        dequant_fragment(codes[buf][u], scales[buf][u], a);
#pragma unroll
        for (int step = 0; step < 4; ++step) {
          const uint2 b = col_valid ? xs[(kb * 4 + step) * cols * 4] : make_uint2(0u, 0u);
          ptx::mma_m16n8k16_bf16(acc[step % 2], a[step], b.x, b.y);
        }
      }
    }
  };
  constexpr int32_t kStride = kWarpsK * kUnroll;  // K blocks per buffer
  load(0, wk);

  // 1. Validate every id (the plan kernel's rules and report: the first bad
  //    pair); with a bad id no CTA writes anything.
  //    The repeat check reads other slots: from shared memory, not as a
  //    chain of dependent global loads.
  const int32_t id = tid < pairs ? p.ids[tid] : -1;  // pairs <= kThreads
  s.ids[tid] = id;
  if (tid == 0) s.bad_pair = INT32_MAX;
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
    }
    return;
  }
  if (reporter) *p.status = {kPlanOk, 0, 0, 0};

  // 2. Only the expert's first pair works.
  if (__syncthreads_or(tid < me && id == expert)) return;

  // 3. The expert's pairs, ascending (ballot per warp, then warp order).
  const bool hit = tid < pairs && id == expert;
  const uint32_t ballot = __ballot_sync(0xFFFFFFFFu, hit);
  if (lane == 0) s.warp_hits[warp] = __popc(ballot);
  __syncthreads();
  int32_t num_rows = 0, pos = __popc(ballot & ((1u << lane) - 1u));
  for (int w = 0; w < kThreads / 32; ++w) {
    if (w < warp) pos += s.warp_hits[w];
    num_rows += s.warp_hits[w];
  }
  num_rows = min(num_rows, kStreamKernelMaxTokens);  // the host keeps T <= kStreamKernelMaxTokens
  if (hit && pos < kStreamKernelMaxTokens) s.pair_of[pos] = tid;
  __syncthreads();
  if (tid < num_rows) {
    const int32_t pr = s.pair_of[tid];
    s.rows[tid] = {pair_row(p.y_map, pr, p.top_k), p.route_w ? p.route_w[pr] : 1.0f};
  }
  stage_b_fragments(p, s.pair_of, num_rows, cols, x_staged);
  __syncthreads();

  // 4. Stream, the first buffer already in flight.
  for (int32_t kb0 = wk; kb0 < k_blocks; kb0 += 2 * kStride) {
    load(1, kb0 + kStride);
    compute(0, kb0);
    load(0, kb0 + 2 * kStride);
    compute(1, kb0 + kStride);
  }

  // 5. K partials -> tile (warp order, then alpha), then the epilogue.
  const int row = chunk * 64 + (wn % 4) * 16 + g;
  s.partial[wk][2 * q][row] = acc[0][0] + acc[1][0];
  s.partial[wk][2 * q + 1][row] = acc[0][1] + acc[1][1];
  s.partial[wk][2 * q][row + 8] = acc[0][2] + acc[1][2];
  s.partial[wk][2 * q + 1][row + 8] = acc[0][3] + acc[1][3];
  __syncthreads();
  for (int i = tid; i < num_rows * C::kRows; i += kThreads) {
    const int tok = i / C::kRows, r = i % C::kRows;
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarpsK; ++w) v += s.partial[w][tok][r];
    const float* alpha = (p.epilogue == EpilogueKind::kSwiGLU && r >= 64) ? p.alpha_up : p.alpha;
    s.tile[tok * C::kTileStride + r] = v * ((alpha ? alpha[expert] : 1.0f) * kWeightDownscale);
  }
  __syncthreads();
  const WorkTile w{expert, 0, num_rows, 0, int32_t(blockIdx.x), 0, 0, k_blocks};
  epilogue_store<kChunks>(p, w, s.tile, C::kTileStride, s.rows, tid, kThreads);
}

template <int kChunks>
Status launch_stream(const GemmParams& p, cudaStream_t stream) {
  const int32_t pairs = p.num_tokens * p.top_k;
  const dim3 grid(uint32_t(p.n / (64 * kChunks)), uint32_t(pairs));
  const size_t smem = weight_streamer_smem_bytes(p.num_tokens, p.k);
  auto kernel = weight_stream_kernel<kChunks>;
  NVFP4MOE_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<grid, kThreads, smem, stream>>>(p);
  NVFP4MOE_CUDA_CHECK_LAUNCH("weight_stream_kernel");
  return ok_status();
}

}  // namespace

size_t weight_streamer_smem_bytes(int64_t num_tokens, int64_t k) {
  return size_t(staged_columns(int32_t(std::min<int64_t>(num_tokens, kStreamKernelMaxTokens)))) * size_t(k) * 2;
}

Status launch_weight_streamer(const GemmParams& p, cudaStream_t stream) {
  const int64_t pairs = int64_t(p.num_tokens) * p.top_k;
  if (p.num_tokens < 1 || p.num_tokens > kStreamKernelMaxTokens || pairs > kThreads ||
      weight_streamer_smem_bytes(p.num_tokens, p.k) > kStreamMaxStagedBytes)
    return make_status(StatusCode::kInternal, "weight streamer called with T = ", p.num_tokens, ", k = ", p.top_k);
  if (!p.ids || !p.status || (!p.x && !p.x_f32) || p.k_splits != 1 || p.y_map == RowMap::kCompact ||
      p.x_map == RowMap::kCompact)
    return make_status(StatusCode::kInternal, "weight streamer parameters are incomplete");
  if (p.epilogue == EpilogueKind::kSwiGLU) {
    if (p.n % 128 != 0) return make_status(StatusCode::kInternal, "SwiGLU streamer needs N % 128 == 0, N = ", p.n);
    return launch_stream<2>(p, stream);
  }
  return launch_stream<1>(p, stream);
}

}  // namespace nvfp4moe::cuda
