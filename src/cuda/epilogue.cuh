// The epilogue shared by every mainloop: per-expert alpha, the router weight,
// SwiGLU on (gate, up) tile pairs, F32/BF16 output, and the scatter to the
// ggml layout. Accumulators arrive transposed in shared memory as
// tile[token][weight row] (F32, alpha already applied); stores are 16- or
// 8-byte vectors along the output row.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/gemm_params.hpp"
#include "cuda/ptx/async_copy.cuh"
#include "cuda/ptx/sync.cuh"
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

__device__ __forceinline__ uint2 pack_bf16x4(float4 v) {
  __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
  return {*reinterpret_cast<uint32_t*>(&lo), *reinterpret_cast<uint32_t*>(&hi)};
}

__device__ __forceinline__ void store4(const GemmParams& p, int64_t row, int64_t col, float4 v) {
  if (p.y_dtype == DType::kF32) {
    *reinterpret_cast<float4*>(static_cast<float*>(p.y) + row * p.y_stride + col) = v;
  } else {
    *reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(p.y) + row * p.y_stride + col) = pack_bf16x4(v);
  }
}

// Where each token row of the tile goes, and its router weight, looked up
// once per tile (one load per row, all in flight together) so the store
// loop below touches only shared memory and the output.
struct EpilogueRows {
  int64_t out_row;
  float route_w;
};

__device__ __forceinline__ void epilogue_fill_rows(const GemmParams& p, const WorkTile& w, EpilogueRows* rows,
                                                   int thread, int num_threads) {
  for (int tr = thread; tr < w.num_rows; tr += num_threads) {
    const int32_t r = w.row_begin + tr;
    rows[tr] = {map_row(p.y_map, p.sorted_src, p.top_k, r), p.route_w ? p.route_w[p.sorted_src[r]] : 1.0f};
  }
}

// SwiGLU on four adjacent features, then the router weight. The one place
// that turns scaled accumulators into an output value (tiles and the split-K
// reduction both call it).
__device__ __forceinline__ float4 finish4(const GemmParams& p, float4 v, const float4* up, float route_w) {
  if (p.epilogue == EpilogueKind::kSwiGLU) {
    v = {activation(p.act, v.x, up->x), activation(p.act, v.y, up->y), activation(p.act, v.z, up->z),
         activation(p.act, v.w, up->w)};
  }
  if (p.route_w != nullptr) v = {v.x * route_w, v.y * route_w, v.z * route_w, v.w * route_w};
  return v;
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
template <int kChunks, int kNumThreads>
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
  for (int tr = thread >> log2_groups; tr < w.num_rows; tr += kNumThreads >> log2_groups) {
    const EpilogueRows row = rows[tr];
    const float* v = src + tr * tile_stride;
    store4(p, row.out_row, col,
           finish4(p, *reinterpret_cast<const float4*>(v), reinterpret_cast<const float4*>(v + 64), row.route_w));
  }
}

// Whether a GEMM tile can leave through epilogue_bulk_store: F32 rows of a
// kStore tile or BF16 rows of a SwiGLU tile, no split K, and 16-byte aligned
// output rows (the ops check y; n and the FFN width are multiples of 64).
__device__ __forceinline__ bool bulk_store_applies(const GemmParams& p) {
  const bool swiglu = p.epilogue == EpilogueKind::kSwiGLU;
  const int64_t elem = p.y_dtype == DType::kF32 ? 4 : 2;
  return p.k_splits == 1 && p.y_dtype == (swiglu ? DType::kBF16 : DType::kF32) &&
         reinterpret_cast<uintptr_t>(p.y) % 16 == 0 && (p.y_stride * elem) % 16 == 0;
}

// The same outputs as epilogue_store, through the bulk copy engine: the
// finished values are packed at the start of their token row of the tile and
// thread tr copies row tr to global memory, so the consumer warps return to
// their K loop while the copies drain. Each issuing thread must call
// ptx::bulk_wait_group_read<0>() before the tile is written again (before the
// barrier that precedes those writes), and ptx::bulk_wait_group<0>() before it
// exits. Called by all kNumThreads threads, like epilogue_store. NOTES: the
// store loop kept a 128 x 256 tile's consumers away from the tensor cores for
// 3.5 us of its 5 us epilogue (epilogue timeline at 9d6d38b).
template <int kChunks, int kNumThreads, int kBlockT>
__device__ __forceinline__ void epilogue_bulk_store(const GemmParams& p, const WorkTile& w, float* tile,
                                                    int tile_stride, const EpilogueRows* rows, int thread) {
  static_assert(kNumThreads >= kBlockT, "one issuing thread per token row");
  constexpr int kTileRows = 64 * kChunks;
  asm volatile("" : "+r"(thread));  // as in epilogue_store
  const bool swiglu = p.epilogue == EpilogueKind::kSwiGLU;
  if (swiglu) {
    // Gate and up of four features -> four BF16 values at byte 2c of their
    // row. A row's column groups are lanes of one warp, which all read before
    // any of them overwrites (the __syncwarp), so the rows need no block
    // barrier and no registers across iterations (an array of the thread's
    // results spilled inside the K loop).
    constexpr int kGroups = kTileRows / 8, kRowsPerWarp = 32 / kGroups;
    static_assert(kGroups <= 32 && 32 % kGroups == 0, "a row's groups inside one warp");
    const int c = (thread % kGroups) * 4;
    const int lane_row = (thread % 32) / kGroups;
    for (int tr0 = (thread / 32) * kRowsPerWarp; tr0 < w.num_rows; tr0 += kNumThreads / kGroups) {
      const int tr = tr0 + lane_row;
      uint2 out = {};
      if (tr < w.num_rows) {
        const float* v = tile + tr * tile_stride + gate_column(c);
        out = pack_bf16x4(finish4(p, *reinterpret_cast<const float4*>(v), reinterpret_cast<const float4*>(v + 64),
                                  rows[tr].route_w));
      }
      __syncwarp();
      if (tr < w.num_rows) *reinterpret_cast<uint2*>(reinterpret_cast<char*>(tile + tr * tile_stride) + 2 * c) = out;
    }
  } else if (p.route_w != nullptr) {
    // In place: each thread rewrites the four values it reads.
    constexpr int kGroups = kTileRows / 4;
    const int c = (thread % kGroups) * 4;
    for (int tr = thread / kGroups; tr < w.num_rows; tr += kNumThreads / kGroups) {
      float4* v = reinterpret_cast<float4*>(tile + tr * tile_stride + c);
      *v = finish4(p, *v, nullptr, rows[tr].route_w);
    }
  }
  ptx::fence_proxy_async_shared();
  ptx::named_barrier_sync(1, kNumThreads);
  const int64_t tile_cols = swiglu ? kTileRows / 2 : kTileRows;
  const int64_t col = int64_t(w.n_tile) * tile_cols;
  const int64_t cols = min(tile_cols, (swiglu ? p.n / 2 : p.n) - col);
  if (thread < w.num_rows && cols > 0) {
    const int64_t elem = swiglu ? 2 : 4;
    char* dst = static_cast<char*>(p.y) + (rows[thread].out_row * p.y_stride + col) * elem;
    ptx::bulk_copy_s2g(dst, tile + thread * tile_stride, uint32_t(cols * elem));
    ptx::bulk_commit_group();
  }
}

}  // namespace nvfp4moe::cuda
