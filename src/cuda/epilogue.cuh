// The epilogue shared by every mainloop: per-expert alpha, the router weight,
// SwiGLU on (gate, up) tile pairs, F32/BF16 output, and the scatter to the
// ggml layout. Accumulators arrive transposed in shared memory as
// tile[token][weight row] (F32, alpha already applied); stores are 16- or
// 8-byte vectors along the output row.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/gemm_params.hpp"
#include "cuda/scheduler.cuh"

namespace nvfp4moe::cuda {

__device__ __forceinline__ float activation(const ActivationParams& a, float g, float u) {
  if (a.kind == Activation::kSwiGLUOai) {
    g = fminf(g, a.limit);
    u = fminf(fmaxf(u, -a.limit), a.limit);
    return (u + 1.0f) * g / (1.0f + expf(-a.swiglu_alpha * g));
  }
  return g / (1.0f + expf(-g)) * u;
}

__device__ __forceinline__ void store4(const GemmParams& p, int64_t row, int64_t col, float4 v) {
  if (p.y_dtype == DType::kF32) {
    *reinterpret_cast<float4*>(static_cast<float*>(p.y) + row * p.y_stride + col) = v;
  } else {
    __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    uint2 packed = {*reinterpret_cast<uint32_t*>(&lo), *reinterpret_cast<uint32_t*>(&hi)};
    *reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(p.y) + row * p.y_stride + col) = packed;
  }
}

// Called by all threads of both consumer warpgroups (num_threads) once the
// tile is in shared memory. tile_stride: floats between token rows.
template <int kBlockT>
__device__ __forceinline__ void epilogue_store(const GemmParams& p, const WorkTile& w, const float* tile,
                                               int tile_stride, int thread, int num_threads) {
  const bool swiglu = p.epilogue == EpilogueKind::kSwiGLU;
  const int groups = swiglu ? 64 / 4 : kBlockN / 4;  // float4 groups per token row
  const int64_t col0 = swiglu ? int64_t(w.n_tile) * 64 : int64_t(w.n_tile) * kBlockN;
  const int64_t out_cols = swiglu ? p.n / 2 : p.n;
  for (int item = thread; item < w.num_rows * groups; item += num_threads) {
    const int tr = item / groups, c = (item % groups) * 4;
    if (col0 + c >= out_cols) continue;
    const int32_t r = w.row_begin + tr;
    const float* src = tile + tr * tile_stride + c;
    float4 v = *reinterpret_cast<const float4*>(src);
    if (swiglu) {
      const float4 u = *reinterpret_cast<const float4*>(src + 64);
      v = {activation(p.act, v.x, u.x), activation(p.act, v.y, u.y), activation(p.act, v.z, u.z),
           activation(p.act, v.w, u.w)};
    }
    if (p.route_w != nullptr) {
      const float rw = p.route_w[p.sorted_src[r]];
      v = {v.x * rw, v.y * rw, v.z * rw, v.w * rw};
    }
    store4(p, map_row(p.y_map, p.sorted_src, p.top_k, r), col0 + c, v);
  }
}

}  // namespace nvfp4moe::cuda
