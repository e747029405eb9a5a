// Tile schedulers: which (expert rows, N tile) a CTA computes next.
//
// compact: a persistent grid walks the device job list, item = job * n_tiles
//          + n_tile, striped over CTAs (item += gridDim.x). Only real work
//          exists; consecutive items share a job's activations, and the jobs
//          of one expert are adjacent, so its weight tiles meet again in L2.
// rect:    the grid is every expert x ceil(T / block_t) row tiles x n_tiles;
//          a CTA whose tile is empty exits at once. This is the baseline the
//          compact schedule replaces.
// Both cut an expert's rows into the same block_t-row tiles of the same
// width, so a tile's arithmetic, and hence every output bit, is the same
// under either.
#pragma once

#include <cstdint>

#include "cuda/gemm_params.hpp"

namespace nvfp4moe::cuda {

struct WorkTile {
  int32_t expert, row_begin, num_rows, tile_rows, n_tile;
  int32_t k_split, k_begin, k_end;  // K range in 64-wide blocks
};

// job_tile_rows() of plan.hpp, on the device: the wgmma width of a tile is
// the smallest power of two >= its rows (at least 16), so a 20-row job pays
// for 32 columns, not for the widest tile. [TAG_WORKLIST_FORMAT]
__host__ __device__ __forceinline__ int32_t tile_rows_for(int32_t num_rows, int32_t block_rows) {
  int32_t t = kMinTileRows;
  while (t < num_rows && t < block_rows) t *= 2;
  return t < block_rows ? t : block_rows;
}

// Items are (row tile, N tile, K split), the split fastest: the splits of
// one output tile and then its neighbours along N share the activation rows.
template <int kBlockT, int kConsumers>
struct TileScheduler {
  const GemmParams& p;
  int32_t n_tiles;
  int32_t per_row_tile;  // n_tiles * k_splits
  int32_t total;
  int32_t next;

  __device__ explicit TileScheduler(const GemmParams& params)
      : p(params), n_tiles(params.n_tiles(kConsumers)), per_row_tile(n_tiles * params.k_splits) {
    total = p.schedule == Schedule::kCompact ? *p.num_jobs * per_row_tile
                                             : p.num_experts * p.rect_tiles_per_expert * per_row_tile;
    next = blockIdx.x;
  }

  __device__ bool next_tile(WorkTile& w) {
    while (next < total) {
      const int32_t item = next;
      next += gridDim.x;
      const int32_t rest = item % per_row_tile;
      const int32_t n_tile = rest / p.k_splits, split = rest % p.k_splits;
      const int32_t k_blocks = p.k / 64, per_split = (k_blocks + p.k_splits - 1) / p.k_splits;
      const int32_t k_begin = split * per_split, k_end = min(k_blocks, k_begin + per_split);
      if (p.schedule == Schedule::kCompact) {
        const ExpertJob job = p.jobs[item / per_row_tile];
        w = {job.expert, job.row_begin, job.num_rows, job.tile_rows, n_tile, split, k_begin, k_end};
        return true;
      }
      const int32_t e = item / (p.rect_tiles_per_expert * per_row_tile);
      const int32_t tile = (item / per_row_tile) % p.rect_tiles_per_expert;
      const int32_t rows = min(kBlockT, p.counts[e] - tile * kBlockT);
      if (rows <= 0) continue;  // the rectangular grid's empty tile
      w = {e, p.offsets[e] + tile * kBlockT, rows, tile_rows_for(rows, kBlockT), n_tile, split, k_begin, k_end};
      return true;
    }
    return false;
  }
};

__device__ __forceinline__ int64_t map_row(RowMap map, const int32_t* sorted_src, int32_t top_k, int32_t r) {
  switch (map) {
    case RowMap::kToken: return sorted_src[r] / top_k;
    case RowMap::kPair: return sorted_src[r];
    default: return r;
  }
}

}  // namespace nvfp4moe::cuda
