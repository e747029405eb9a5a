// The epilogue shared by every mainloop: per-expert alpha, the router weight,
// SwiGLU on (gate, up) tile pairs, F32/BF16 output, and the scatter to the
// ggml layout. Accumulators arrive transposed in shared memory as
// tile[token][weight row] (F32, alpha already applied); stores are 16- or
// 8-byte vectors along the output row.
#pragma once

#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "cuda/gemm_params.hpp"
#include "cuda/ptx/ld_shared.cuh"
#include "cuda/ptx/sfu.cuh"
#include "cuda/ptx/st_global.cuh"
#include "cuda/scheduler.cuh"

namespace nvfp4moe::cuda {

// The sigmoid with the special-function unit's exp2 and reciprocal, flushed
// to zero (a few ulp, against the 2^-9 of the BF16 rounding of h that
// follows; e^-x past F32's range gives inf, then 0, as the IEEE form does).
// NOTES: the IEEE expf and division were ~20 instructions per element, the
// division's slow-path check a branch and a call that kept ptxas from
// interleaving the elements, all on the epilogue's path, where the tensor
// cores wait (SASS at f5b0193).
__device__ __forceinline__ float sigmoid_approx(float x) {
  constexpr float kLog2e = 1.4426950408889634f;
  return ptx::rcp_approx_ftz(1.0f + ptx::ex2_approx_ftz(-kLog2e * x));
}

__device__ __forceinline__ float silu_mul(float g, float u) { return g * sigmoid_approx(g) * u; }

__device__ __forceinline__ float swiglu_oai(const ActivationParams& a, float g, float u) {
  // Comparisons, not fminf/fmaxf, which return the limit for a NaN: a NaN
  // gate or up stays NaN, as in the CPU backend.
  g = g > a.limit ? a.limit : g;
  u = u > a.limit ? a.limit : u;
  u = u < -a.limit ? -a.limit : u;
  return (u + 1.0f) * (g * sigmoid_approx(a.swiglu_alpha * g));
}

__device__ __forceinline__ float activation(const ActivationParams& a, float g, float u) {
  return a.kind == Activation::kSwiGLUOai ? swiglu_oai(a, g, u) : silu_mul(g, u);
}

__device__ __forceinline__ void store4(const GemmParams& p, int64_t row, int64_t col, float4 v) {
  if (p.y_dtype == DType::kF32) {
    if (p.y_round_to_bf16)
      v = {__bfloat162float(__float2bfloat16_rn(v.x)), __bfloat162float(__float2bfloat16_rn(v.y)),
           __bfloat162float(__float2bfloat16_rn(v.z)), __bfloat162float(__float2bfloat16_rn(v.w))};
    *reinterpret_cast<float4*>(static_cast<float*>(p.y) + row * p.y_stride + col) = v;
  } else {
    __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
    uint2 packed = {*reinterpret_cast<uint32_t*>(&lo), *reinterpret_cast<uint32_t*>(&hi)};
    *reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(p.y) + row * p.y_stride + col) = packed;
  }
}

// Where each token row of the tile goes, and its router weight, in shared
// memory so the store loop below touches only shared memory and the output.
struct EpilogueRows {
  int64_t out_row;
  float route_w;
};

// Tile row `thread`'s sorted_src entry and router weight, loaded by one
// consumer thread per row (a tile has no more rows than consumer threads)
// before its K loop, so that the epilogue waits for no global load.
struct RowSource {
  int32_t src = 0;
  float route_w = 1.0f;
};

__device__ __forceinline__ RowSource load_row_source(const GemmParams& p, const WorkTile& w, int thread) {
  RowSource rs;
  if (thread < w.num_rows && (p.y_map != RowMap::kCompact || p.route_w)) {
    rs.src = p.sorted_src[w.row_begin + thread];
    if (p.route_w) rs.route_w = p.route_w[rs.src];
  }
  return rs;
}

__device__ __forceinline__ void epilogue_fill_rows(const GemmParams& p, const WorkTile& w, EpilogueRows* rows,
                                                   RowSource rs, int thread) {
  if (thread < w.num_rows) rows[thread] = {map_row_from(p.y_map, rs.src, p.top_k, w.row_begin + thread), rs.route_w};
}

// SwiGLU on four adjacent features, then the router weight. The one place
// that turns scaled accumulators into an output value (tiles and the split-K
// reduction both call it).
__device__ __forceinline__ float4 finish4(const GemmParams& p, float4 v, const float4* up, float route_w) {
  if (p.epilogue == EpilogueKind::kSwiGLU) {
    // The kind is tested once per four features, not per element.
    const float4 u = *up;
    if (p.act.kind == Activation::kSwiGLUOai)
      v = {swiglu_oai(p.act, v.x, u.x), swiglu_oai(p.act, v.y, u.y), swiglu_oai(p.act, v.z, u.z),
           swiglu_oai(p.act, v.w, u.w)};
    else
      v = {silu_mul(v.x, u.x), silu_mul(v.y, u.y), silu_mul(v.z, u.z), silu_mul(v.w, u.w)};
  }
  if (p.route_w != nullptr) v = {v.x * route_w, v.y * route_w, v.z * route_w, v.w * route_w};
  return v;
}

// The unrolled row stores of the BF16 and F32 rows paths: a lane's kIters
// rows (first_row, then every kRowsPerPass-th) in one unrolled sequence of
// shared loads (its row entry, its 16 bytes of the tile row, tile_stride
// elements apart), then one predicated 16-byte store per row into y (the
// lane's first column), with kRouteW the router weight applied. The loads
// are asm volatile and rows past the tile read row 0 and are not stored: as
// plain loads behind a branch per store, ptxas re-issued half of them just
// before their stores (SASS), which put the shared-load latency back
// between the stores, and a predicated load made it serialize the wgmmas
// and spill (C7512).
template <int kIters, int kRowsPerPass, bool kRouteW, typename Elem>
__device__ __forceinline__ void store_lane_rows(const GemmParams& p, const WorkTile& w, const Elem* src,
                                                int tile_stride, const EpilogueRows* rows, int first_row, Elem* y) {
  static_assert(kIters <= 16, "a lane's rows are held in registers: 6 or 7 per row");
  static_assert(offsetof(EpilogueRows, out_row) == 0 && offsetof(EpilogueRows, route_w) == 8,
                "a row entry read as out_row, then route_w");
  const uint32_t src_window = static_cast<uint32_t>(__cvta_generic_to_shared(src));
  const uint32_t rows_window = static_cast<uint32_t>(__cvta_generic_to_shared(rows));
  uint4 v[kIters];
  int64_t out[kIters];
  float route_w[kIters];
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    const int tr = first_row + i * kRowsPerPass, r = tr < w.num_rows ? tr : 0;
    if constexpr (kRouteW) {
      const uint4 e = ptx::ld_shared_v4(rows_window + r * uint32_t(sizeof(EpilogueRows)));
      out[i] = int64_t(uint64_t(e.y) << 32 | e.x) * p.y_stride;
      route_w[i] = __uint_as_float(e.z);
    } else {
      const uint2 o = ptx::ld_shared_v2(rows_window + r * uint32_t(sizeof(EpilogueRows)));
      out[i] = int64_t(uint64_t(o.y) << 32 | o.x) * p.y_stride;
    }
    v[i] = ptx::ld_shared_v4(src_window + r * tile_stride * uint32_t(sizeof(Elem)));
  }
#pragma unroll
  for (int i = 0; i < kIters; ++i) {
    uint4 o = v[i];
    if constexpr (kRouteW) {
      if (p.route_w != nullptr) {
        o = {__float_as_uint(__uint_as_float(o.x) * route_w[i]), __float_as_uint(__uint_as_float(o.y) * route_w[i]),
             __float_as_uint(__uint_as_float(o.z) * route_w[i]), __float_as_uint(__uint_as_float(o.w) * route_w[i])};
      }
    }
    ptx::st_global_v4_if(first_row + i * kRowsPerPass < w.num_rows, y + out[i], o);
  }
}

// Column of gate feature f in the interleaved gate_up layout (64-row blocks
// alternate gate, up); up is 64 columns further.
__device__ __forceinline__ int64_t gate_column(int64_t f) { return (f / 64) * 128 + f % 64; }

// Called by all kNumThreads threads of the consumer warps once the tile and
// its row table are in shared memory. tile_stride: floats between token
// rows. With split K the tile goes, raw, to the partial-sum buffer.
// Each thread keeps one 4-column group and walks the token rows: kNumThreads
// is a multiple of the groups per row, so the column never changes and no
// index needs a division. NOTES: with one (row, column) item per iteration,
// the runtime division of the item index made every iteration a ~380-cycle
// dependent chain; a 128 x 256 tile's two passes took ~7 us of its ~33 us
// (epilogue timeline at d764559), independent of the stores themselves.
// kMaxRows > 0 (the GEMM: its wgmma width, which no tile's rows exceed):
// F32 rows without SwiGLU (the layer's down, F32 MUL_MAT_ID) go through
// store_lane_rows above instead of the row loop, unless y_round_to_bf16.
template <int kChunks, int kNumThreads, int kMaxRows = 0>
__device__ __forceinline__ void epilogue_store(const GemmParams& p, const WorkTile& w, const float* tile,
                                               int tile_stride, const EpilogueRows* rows, int thread) {
  constexpr int kTileRows = 64 * kChunks;
  // An opaque copy: without it ptxas computes the thread's column and row
  // offsets before the caller's K loop and keeps them live across it, where
  // the wide GEMM has no registers to spare (spills in its K loop).
  asm volatile("" : "+r"(thread));
  // Column groups per token row: the tile's, or half of them after SwiGLU.
  constexpr int kGroups = kTileRows / 4, kSwiGLUGroups = kTileRows / 8;
  static_assert(kNumThreads % kGroups == 0 && kNumThreads % kSwiGLUGroups == 0,
                "every thread keeps one column group");
  if (p.k_splits > 1) {
    float* part = p.partial + int64_t(w.k_split) * p.sorted_rows * p.n;
    const int c = (thread % kGroups) * 4;
    const int64_t col = int64_t(w.n_tile) * kTileRows + c;
    if (col >= p.n) return;
    for (int tr = thread / kGroups; tr < w.num_rows; tr += kNumThreads / kGroups)
      *reinterpret_cast<float4*>(part + int64_t(w.row_begin + tr) * p.n + col) =
          *reinterpret_cast<const float4*>(tile + tr * tile_stride + c);
    return;
  }
  // Both group counts are powers of two: shifts, not divisions.
  const bool swiglu = p.epilogue == EpilogueKind::kSwiGLU;
  constexpr int kLog2Groups = __builtin_ctz(kGroups);
  static_assert(kGroups == 1 << kLog2Groups, "column groups per row: a power of two");
  const int log2_groups = swiglu ? kLog2Groups - 1 : kLog2Groups;
  const int c = (thread & ((1 << log2_groups) - 1)) * 4;
  const int64_t col = (int64_t(w.n_tile) << (log2_groups + 2)) + c;
  if (col >= (swiglu ? p.n / 2 : p.n)) return;
  const float* src = tile + (swiglu ? gate_column(c) : c);
  if constexpr (kMaxRows > 0) {
    if (!swiglu && p.y_dtype == DType::kF32 && !p.y_round_to_bf16) {
      constexpr int kRowsPerPass = kNumThreads / kGroups;
      store_lane_rows<(kMaxRows + kRowsPerPass - 1) / kRowsPerPass, kRowsPerPass, true>(
          p, w, src, tile_stride, rows, thread >> kLog2Groups, static_cast<float*>(p.y) + col);
      return;
    }
  }
  for (int tr = thread >> log2_groups; tr < w.num_rows; tr += kNumThreads >> log2_groups) {
    const EpilogueRows row = rows[tr];
    const float* v = src + tr * tile_stride;
    store4(p, row.out_row, col,
           finish4(p, *reinterpret_cast<const float4*>(v), reinterpret_cast<const float4*>(v + 64), row.route_w));
  }
}

// Gate and up accumulators of the same (feature, token) positions: g becomes
// act(g * scale_g, u * scale_u), exactly the value the F32 path activates.
template <int kN>
__device__ __forceinline__ void swiglu_in_place(const ActivationParams& a, float (&g)[kN], const float (&u)[kN],
                                                float scale_g, float scale_u) {
  if (a.kind == Activation::kSwiGLUOai) {
#pragma unroll
    for (int i = 0; i < kN; ++i) g[i] = swiglu_oai(a, g[i] * scale_g, u[i] * scale_u);
  } else {
#pragma unroll
    for (int i = 0; i < kN; ++i) g[i] = silu_mul(g[i] * scale_g, u[i] * scale_u);
  }
}

// The BF16 rows path: a tile already scaled and rounded to BF16 in shared
// memory as tile[token][weight row] (kTileRows = 256 rows, or 128 features
// of h on the SwiGLU rows path; tile_stride elements apart), 16 bytes per
// lane: each store instruction writes whole output rows, 512 or 2 x 256
// contiguous bytes, up to `width` columns. For kStore tiles to BF16
// without router weights or split K (bf16_rows_epilogue, gemm_params.hpp),
// where the F32 path's two passes of scalar tile writes and float4 reads
// were 9-18% of the wide kernel's time (ablation at 0e0a748,
// bench/results/2026-11-30-h200-0e0a748-epilogue-parts.json). Rounding the
// scaled accumulator once, here as there, gives the same bits.
template <int kTileRows, int kNumThreads, int kMaxRows>
__device__ __forceinline__ void epilogue_store_bf16_rows(const GemmParams& p, const WorkTile& w, const uint16_t* tile,
                                                         int tile_stride, const EpilogueRows* rows, int thread,
                                                         int64_t width) {
  // 16 bytes per lane: one warp per 256-row token row, two per 128-row one.
  constexpr int kLanesPerRow = kTileRows / 8;
  static_assert(kLanesPerRow <= 32 && 32 % kLanesPerRow == 0, "whole token rows per warp");
  constexpr int kRowsPerWarp = 32 / kLanesPerRow;
  static_assert(kNumThreads % 32 == 0, "whole warps");
  constexpr int kRowsPerPass = kNumThreads / 32 * kRowsPerWarp;
  // Every row of the lane (at most kMaxRows: the caller's wgmma width, which
  // no tile's rows exceed) by store_lane_rows, so that several rows' shared
  // loads are in flight ahead of the stores instead of each store waiting
  // behind its own two. NOTES: ncu of qwen3 down T=2048
  // (bench/results/ncu/2026-12-02-h200-dedcfc9-store-traffic-*): with a
  // loop of four rows per unrolled step, 29% of the store loop's stall
  // samples waited on those loads (short scoreboard), and the loop was
  // 10.5% of the consumers' samples; the K loop stalled no more than
  // without the stores.
  constexpr int kIters = (kMaxRows + kRowsPerPass - 1) / kRowsPerPass;
  asm volatile("" : "+r"(thread));  // as in epilogue_store
  const int lane = thread % 32, warp = thread / 32, piece = lane % kLanesPerRow;
  const int64_t col = int64_t(w.n_tile) * kTileRows + piece * 8;
  if (col >= width) return;  // columns past the output (N % 256 != 0, or F % 128 != 0 for h)
  const uint16_t* src = tile + piece * 8;
  auto* y = static_cast<uint16_t*>(p.y) + col;
  store_lane_rows<kIters, kRowsPerPass, false>(p, w, src, tile_stride, rows,
                                               warp * kRowsPerWarp + lane / kLanesPerRow, y);
}

}  // namespace nvfp4moe::cuda
