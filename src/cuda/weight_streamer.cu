// Weight streamer: MUL_MAT_ID for small batches (T <= kStreamMaxTokens).
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
// is one warp's mma A fragment), kWarpsK along K (k64 blocks dealt round
// robin). Each warp double-buffers kUnroll fragments of global loads, so
// ~4.6 KB per warp are in flight. The K partial sums meet in shared memory
// and are added in warp order, then the shared epilogue (alpha, SwiGLU on
// gate/up chunk pairs, router weight, F32/BF16 store) writes the rows.
// Summation order differs from the wgmma path (a different K split), so
// outputs agree with it to fp32 rounding, not bit for bit; for a given
// input they are the same on every run, and they do not depend on T or on
// the other tokens (each output row's order is fixed).
#include <cstdint>

#include "cuda/check.hpp"
#include "cuda/dequant.cuh"
#include "cuda/epilogue.cuh"
#include "cuda/launch.hpp"
#include "cuda/plan_kernels.cuh"
#include "cuda/ptx/mma.cuh"

namespace nvfp4moe::cuda {
namespace {

constexpr int kWarpsK = 2;
constexpr int kUnroll = 4;

template <int kChunks>
struct StreamConfig {
  static constexpr int kWarpsN = 4 * kChunks;
  static constexpr int kThreads = 32 * kWarpsN * kWarpsK;
  static constexpr int kRows = 64 * kChunks;      // weight rows of the CTA
  static constexpr int kTileStride = kRows + 4;  // floats between token rows of the tile
};

template <int kChunks>
struct StreamShared {
  using C = StreamConfig<kChunks>;
  float partial[kWarpsK][kStreamMaxTokens][C::kRows];
  float tile[kStreamMaxTokens * C::kTileStride];
  EpilogueRows rows[kStreamMaxTokens];
  int32_t pair_of[kStreamMaxTokens];  // the expert's pairs, ascending
  int32_t warp_hits[C::kThreads / 32];
  int32_t bad_pair;
};

// The activation or output row of a pair (the streamer has no sorted order).
__device__ __forceinline__ int64_t pair_row(RowMap map, int32_t pair, int32_t top_k) {
  return map == RowMap::kToken ? pair / top_k : pair;
}

// B fragment of one k16 step for column g: x[row][k0 + 2q .. +1] and
// [k0 + 2q + 8 .. +9] as bf16x2; zeros for a column past the expert's rows.
__device__ __forceinline__ void load_b(const GemmParams& p, int64_t xrow, bool valid, int k, uint32_t& b0,
                                       uint32_t& b1) {
  if (!valid) {
    b0 = b1 = 0;
  } else if (p.x_f32) {
    const float* x = p.x_f32 + xrow * p.x_stride + k;
    const float2 lo = *reinterpret_cast<const float2*>(x), hi = *reinterpret_cast<const float2*>(x + 8);
    b0 = ptx::pack_bf16x2_rn(lo.x, lo.y);
    b1 = ptx::pack_bf16x2_rn(hi.x, hi.y);
  } else {
    const uint16_t* x = p.x + xrow * p.x_stride + k;
    b0 = *reinterpret_cast<const uint32_t*>(x);
    b1 = *reinterpret_cast<const uint32_t*>(x + 8);
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
__global__ void __launch_bounds__(StreamConfig<kChunks>::kThreads)
    weight_stream_kernel(const __grid_constant__ GemmParams p) {
  using C = StreamConfig<kChunks>;
  __shared__ StreamShared<kChunks> s;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int32_t pairs = p.num_tokens * p.top_k, me = int32_t(blockIdx.y);
  const bool reporter = blockIdx.x == 0 && blockIdx.y == 0 && tid == 0;

  // 1. Validate every id (the plan kernel's rules and report: the first bad
  //    pair); with a bad id no CTA writes anything.
  if (tid == 0) s.bad_pair = INT32_MAX;
  __syncthreads();
  int32_t id = -1;
  for (int32_t i = tid; i < pairs; i += C::kThreads) {
    const int32_t e = p.ids[i];
    if (e < 0 || e >= p.num_experts) {
      atomicMin(&s.bad_pair, i);
    } else {
      for (int32_t j = i - i % p.top_k; j < i; ++j)
        if (p.ids[j] == e) atomicMin(&s.bad_pair, i);
    }
    if (i == tid) id = e;  // pairs <= kThreads: each thread keeps its own
  }
  __syncthreads();
  if (s.bad_pair != INT32_MAX) {
    if (reporter) {
      const int32_t b = s.bad_pair, e = p.ids[b];
      *p.status = {e < 0 || e >= p.num_experts ? kPlanIdOutOfRange : kPlanDuplicateId, b / p.top_k, b % p.top_k, e};
    }
    return;
  }
  if (reporter) *p.status = {kPlanOk, 0, 0, 0};

  // 2. Only the expert's first pair works.
  const int32_t expert = p.ids[me];
  if (__syncthreads_or(tid < me && id == expert)) return;

  // 3. The expert's pairs, ascending (ballot per warp, then warp order).
  const bool hit = tid < pairs && id == expert;
  const uint32_t ballot = __ballot_sync(0xFFFFFFFFu, hit);
  if (lane == 0) s.warp_hits[warp] = __popc(ballot);
  __syncthreads();
  int32_t num_rows = 0, pos = __popc(ballot & ((1u << lane) - 1u));
  for (int w = 0; w < C::kThreads / 32; ++w) {
    if (w < warp) pos += s.warp_hits[w];
    num_rows += s.warp_hits[w];
  }
  num_rows = min(num_rows, kStreamMaxTokens);  // the host keeps T <= kStreamMaxTokens
  if (hit && pos < kStreamMaxTokens) s.pair_of[pos] = tid;
  __syncthreads();
  if (tid < num_rows) {
    const int32_t pr = s.pair_of[tid];
    s.rows[tid] = {pair_row(p.y_map, pr, p.top_k), p.route_w ? p.route_w[pr] : 1.0f};
  }

  // 4. Stream the expert's rows [64 * kChunks * blockIdx.x, +kRows) x K.
  const int wn = warp % C::kWarpsN, wk = warp / C::kWarpsN;
  const int chunk = wn / 4, t = (wn % 4) * 32 + lane;  // t: thread index inside the chunk's fragment
  const int g = lane / 4, q = lane % 4;
  const int32_t k_blocks = p.k / 64, n_blocks = p.n / 64;
  const uint8_t* w0 =
      p.w_packed + (int64_t(expert) * n_blocks + int64_t(blockIdx.x) * kChunks + chunk) * k_blocks * kSm90ChunkBytes;
  const bool col_valid = g < num_rows;
  const int64_t xrow = col_valid ? pair_row(p.x_map, s.pair_of[g], p.top_k) : 0;
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};

  uint4 codes[2][kUnroll];
  uint2 scales[2][kUnroll];
  auto load = [&](int buf, int32_t kb0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int32_t kb = kb0 + u * kWarpsK;
      if (kb < k_blocks) {
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
          uint32_t b0, b1;
          load_b(p, xrow, col_valid, kb * 64 + step * 16 + 2 * q, b0, b1);
          ptx::mma_m16n8k16_bf16(acc, a[step], b0, b1);
        }
      }
    }
  };
  constexpr int32_t kStride = kWarpsK * kUnroll;  // K blocks per buffer
  load(0, wk);
  for (int32_t kb0 = wk; kb0 < k_blocks; kb0 += 2 * kStride) {
    load(1, kb0 + kStride);
    compute(0, kb0);
    load(0, kb0 + 2 * kStride);
    compute(1, kb0 + kStride);
  }

  // 5. K partials -> tile (warp order, then alpha), then the epilogue.
  const int row = chunk * 64 + (wn % 4) * 16 + g;
  s.partial[wk][2 * q][row] = acc[0];
  s.partial[wk][2 * q + 1][row] = acc[1];
  s.partial[wk][2 * q][row + 8] = acc[2];
  s.partial[wk][2 * q + 1][row + 8] = acc[3];
  __syncthreads();
  for (int i = tid; i < num_rows * C::kRows; i += C::kThreads) {
    const int tok = i / C::kRows, r = i % C::kRows;
    float v = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarpsK; ++w) v += s.partial[w][tok][r];
    const float* alpha = (p.epilogue == EpilogueKind::kSwiGLU && r >= 64) ? p.alpha_up : p.alpha;
    s.tile[tok * C::kTileStride + r] = v * ((alpha ? alpha[expert] : 1.0f) * kWeightDownscale);
  }
  __syncthreads();
  const WorkTile w{expert, 0, num_rows, 0, int32_t(blockIdx.x), 0, 0, k_blocks};
  epilogue_store<kChunks>(p, w, s.tile, C::kTileStride, s.rows, tid, C::kThreads);
}

template <int kChunks>
Status launch_stream(const GemmParams& p, cudaStream_t stream) {
  using C = StreamConfig<kChunks>;
  const int32_t pairs = p.num_tokens * p.top_k;
  const dim3 grid(uint32_t(p.n / (64 * kChunks)), uint32_t(pairs));
  weight_stream_kernel<kChunks><<<grid, C::kThreads, 0, stream>>>(p);
  NVFP4MOE_CUDA_CHECK_LAUNCH("weight_stream_kernel");
  return ok_status();
}

}  // namespace

Status launch_weight_streamer(const GemmParams& p, cudaStream_t stream) {
  const int64_t pairs = int64_t(p.num_tokens) * p.top_k;
  if (p.num_tokens < 1 || p.num_tokens > kStreamMaxTokens || pairs > StreamConfig<1>::kThreads)
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
