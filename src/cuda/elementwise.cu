// Small memory-bound kernels around the GEMMs: input conversion, the
// deterministic slot combine, and the unfused baseline's separate passes.
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "cuda/check.hpp"
#include "cuda/epilogue.cuh"
#include "cuda/launch.hpp"
#include "cuda/ptx/grid_dependency.cuh"
#include "cuda/ptx/mma.cuh"

namespace nvfp4moe::cuda {
namespace {

constexpr int kThreads = 256;

uint32_t blocks_for(int64_t n) { return uint32_t(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535 * 8)); }

// 8 values per thread and step: two float4 loads, one 16-byte store, each
// pair rounded by pack_bf16x2_rn, the rounding of every BF16 conversion in
// the backend. x and y are 16-byte
// aligned (the op checks x; y is the workspace). NOTES: one element per
// thread (4-byte loads, 2-byte stores) took ~36 us for qwen3 down's F32
// per-slot rows at T = 2048 (75 MB moved), 21% of the op.
__global__ void f32_to_bf16_kernel(const float* x, uint16_t* y, int64_t n, bool next_overlaps,
                                   bool overlaps_previous) {
  if (next_overlaps) ptx::launch_dependents();
  const int64_t vectors = n / 8, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t v = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; v < vectors; v += stride) {
    const float4 a = reinterpret_cast<const float4*>(x)[2 * v], b = reinterpret_cast<const float4*>(x)[2 * v + 1];
    reinterpret_cast<uint4*>(y)[v] = {ptx::pack_bf16x2_rn(a.x, a.y), ptx::pack_bf16x2_rn(a.z, a.w),
                                      ptx::pack_bf16x2_rn(b.x, b.y), ptx::pack_bf16x2_rn(b.z, b.w)};
  }
  for (int64_t i = vectors * 8 + blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += stride)
    y[i] = uint16_t(ptx::pack_bf16x2_rn(x[i], 0.0f) & 0xFFFFu);
  // Launched beside the plan: the next kernel in the stream waits for this
  // grid only, so it must not end before the plan does.
  if (overlaps_previous && blockIdx.x == 0 && threadIdx.x == 0) ptx::grid_dependency_wait();
}

// A slot row's kVec columns as floats: F32 rows, or BF16 rows (exact).
template <int kVec>
__device__ __forceinline__ void load_slot(const float* p, float (&v)[kVec]) {
  if constexpr (kVec == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
    v[0] = *p;
  }
}
template <int kVec>
__device__ __forceinline__ void load_slot(const uint16_t* p, float (&v)[kVec]) {
  if constexpr (kVec == 4) {
    const uint2 q = *reinterpret_cast<const uint2*>(p);
    v[0] = __uint_as_float(q.x << 16), v[1] = __uint_as_float(q.x & 0xFFFF0000u);
    v[2] = __uint_as_float(q.y << 16), v[3] = __uint_as_float(q.y & 0xFFFF0000u);
  } else {
    v[0] = __uint_as_float(uint32_t(*p) << 16);
  }
}

// out[t][c] = w[t*k] y[t*k][c] + ... + w[t*k + k-1] y[t*k + k-1][c], summed
// from 0 in slot order; w: route_w, or 1 (nullptr: rows already weighted).
// Slot: float or uint16_t (BF16 rows). kVec columns per thread (4: vector
// loads and float4 stores; 1 when out is not 16-byte aligned); tokens along
// the grid's y. A token's slots are loaded kBatch at a time before any of
// them is added, so that each thread has kBatch loads in flight; the
// additions keep their order. NOTES: one element per thread with a 64-bit
// division of the flat index ran the qwen3 layer's combine (T = 2048: 134 MB
// of F32 per-pair rows) at 3.8 TB/s, 77% of the DRAM peak (ncu at 9a59126);
// a plain loop over the slots compiled to loads between the dependent
// additions, one or two in flight per thread (SASS). Batched, qwen3's decode
// layer ran 1.02-1.05x in a graph and T = 2048 as before
// (bench/results/2026-12-02-h200-ab-combine-loads-and-overlap.json).
// The router weights are the caller's input, never an output of the
// kernels before this one in the stream (the layer's first kernel starts
// only after the caller's work), so a CTA loads its token's first batch of
// them before the grid-dependency wait, off the path from the down's last
// store to this kernel's first addition. NOTES: loaded beside each
// addition, behind the additions' early break, they were eight dependent
// loads on that path; loaded before the wait, qwen3's decode layer ran
// 1.007-1.014x in a graph at T = 1-4, as fast as with no weights at all
// (H100, bench/results/2026-12-07-h100-ab-combine-weights-before-wait.json).
template <int kVec, typename Slot>
__global__ void combine_slots_kernel(const Slot* y, const float* route_w, int64_t num_tokens, int32_t top_k,
                                     int64_t cols, const PlanStatus* status, float* out, bool overlaps_previous) {
  constexpr int kBatch = 8;
  // Predicated, not behind the additions' early break, so that they issue together.
  const auto load_weights = [&](int64_t t, int32_t j0, float (&w)[kBatch]) {
#pragma unroll
    for (int b = 0; b < kBatch; ++b) w[b] = route_w && j0 + b < top_k ? route_w[t * top_k + j0 + b] : 1.0f;
  };
  float w[kBatch];
  const int64_t t_first = blockIdx.y;  // < num_tokens: the grid's y is min(T, 65535)
  load_weights(t_first, 0, w);
  if (overlaps_previous) ptx::grid_dependency_wait();  // y and status are the previous kernel's
  if (status->code != kPlanOk) return;
  const int64_t c = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * kVec;
  if (c >= cols) return;
  for (int64_t t = t_first; t < num_tokens; t += gridDim.y) {
    float sum[kVec] = {};
    const Slot* rows = y + t * top_k * cols + c;
    for (int32_t j0 = 0; j0 < top_k; j0 += kBatch) {
      float v[kBatch][kVec];
#pragma unroll
      for (int b = 0; b < kBatch; ++b)
        if (j0 + b < top_k) load_slot<kVec>(rows + (j0 + b) * cols, v[b]);
      if (t != t_first || j0 != 0) load_weights(t, j0, w);
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        if (j0 + b >= top_k) break;
        // Product, then sum: each slot's contribution rounds once as it is
        // added, whichever way the compiler fuses them (fma(1, v, s) = s + v).
#pragma unroll
        for (int i = 0; i < kVec; ++i) sum[i] = __fmaf_rn(w[b], v[b][i], sum[i]);
      }
    }
    if constexpr (kVec == 4)
      *reinterpret_cast<float4*>(out + t * cols + c) = {sum[0], sum[1], sum[2], sum[3]};
    else
      out[t * cols + c] = sum[0];
  }
}

__global__ void scale_pairs_kernel(float* y, const int32_t* ids, const float* alpha, const float* alpha_up,
                                   const float* route_w, int64_t pairs, int64_t cols, const PlanStatus* status) {
  if (status->code != kPlanOk) return;
  const int64_t n = pairs * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t pair = i / cols;
    // With alpha_up, columns come in interleaved 64-wide (gate, up) blocks.
    const float* a = (alpha_up && ((i % cols) / 64) % 2 == 1) ? alpha_up : alpha;
    float s = a ? a[ids[pair]] : 1.0f;
    if (route_w) s *= route_w[pair];
    y[i] *= s;
  }
}

__global__ void swiglu_pairs_kernel(const float* gate_up, int64_t pairs, int64_t ffn, ActivationParams act,
                                    __nv_bfloat16* h,
                                    const PlanStatus* status) {
  if (status->code != kPlanOk) return;  // gate_up was never written
  const int64_t n = pairs * ffn;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t pair = i / ffn, f = i % ffn;
    // Interleaved gate_up rows: block 2b = gate features [64b, 64b+64), block 2b+1 = up.
    const int64_t gcol = (f / 64) * 128 + f % 64;
    const float* row = gate_up + pair * 2 * ffn;
    h[i] = __float2bfloat16_rn(activation(act, row[gcol], row[gcol + 64]));
  }
}

}  // namespace

Status launch_f32_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t stream, bool next_overlaps,
                          LaunchOrder order) {
  if (n == 0) return ok_status();
  NVFP4MOE_CUDA_TRY(launch_kernel(f32_to_bf16_kernel, dim3(blocks_for((n + 7) / 8)), dim3(kThreads), 0, stream, order,
                                  x, y, n, next_overlaps, order == LaunchOrder::kOverlapPrevious));
  NVFP4MOE_CUDA_CHECK_LAUNCH("f32_to_bf16_kernel");
  return ok_status();
}

Status launch_combine_slots(const void* y, DType y_dtype, const float* route_w, int64_t num_tokens, int64_t top_k,
                            int64_t cols, const PlanStatus* status, float* out, cudaStream_t stream,
                            LaunchOrder order) {
  if (num_tokens * cols == 0) return ok_status();
  if (y_dtype != DType::kF32 && y_dtype != DType::kBF16)
    return make_status(StatusCode::kInternal, "slot rows are F32 or BF16");
  constexpr int kCombineThreads = 128;
  const bool vec4 = cols % 4 == 0 && reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const int64_t threads_per_row = vec4 ? cols / 4 : cols;
  const dim3 grid(uint32_t((threads_per_row + kCombineThreads - 1) / kCombineThreads),
                  uint32_t(std::min<int64_t>(num_tokens, 65535)));
  const bool overlaps = order == LaunchOrder::kOverlapPrevious;
  const auto launch = [&](auto kernel, const auto* rows) {
    return launch_kernel(kernel, grid, dim3(kCombineThreads), 0, stream, order, rows, route_w, num_tokens,
                         int32_t(top_k), cols, status, out, overlaps);
  };
  const auto* f32 = static_cast<const float*>(y);
  const auto* bf16 = static_cast<const uint16_t*>(y);
  if (y_dtype == DType::kF32)
    NVFP4MOE_CUDA_TRY(vec4 ? launch(combine_slots_kernel<4, float>, f32) : launch(combine_slots_kernel<1, float>, f32));
  else
    NVFP4MOE_CUDA_TRY(vec4 ? launch(combine_slots_kernel<4, uint16_t>, bf16)
                           : launch(combine_slots_kernel<1, uint16_t>, bf16));
  NVFP4MOE_CUDA_CHECK_LAUNCH("combine_slots_kernel");
  return ok_status();
}

Status launch_scale_pairs(float* y, const int32_t* ids, const float* alpha, const float* alpha_up,
                          const float* route_w, int64_t pairs, int64_t cols, const PlanStatus* status,
                          cudaStream_t stream) {
  if (pairs * cols == 0) return ok_status();
  scale_pairs_kernel<<<blocks_for(pairs * cols), kThreads, 0, stream>>>(y, ids, alpha, alpha_up, route_w, pairs,
                                                                        cols, status);
  NVFP4MOE_CUDA_CHECK_LAUNCH("scale_pairs_kernel");
  return ok_status();
}

Status launch_swiglu_pairs(const float* gate_up, int64_t pairs, int64_t ffn, const ActivationParams& act,
                           const PlanStatus* status, uint16_t* h, cudaStream_t stream) {
  if (pairs * ffn == 0) return ok_status();
  swiglu_pairs_kernel<<<blocks_for(pairs * ffn), kThreads, 0, stream>>>(gate_up, pairs, ffn, act,
                                                                        reinterpret_cast<__nv_bfloat16*>(h), status);
  NVFP4MOE_CUDA_CHECK_LAUNCH("swiglu_pairs_kernel");
  return ok_status();
}

}  // namespace nvfp4moe::cuda
