// Tile schedulers: which (expert rows, N tile) a CTA computes next.
//
// compact: the device job list, item = job * n_tiles + n_tile. A grid of
//          at most five waves has one CTA per possible item, each taking
//          item blockIdx.x (compact_grid_ctas, launch.hpp); larger ones are
//          persistent and walk the items. There wide tiles take items in
//          order from a global counter as CTAs come free (tiles of 32, 64
//          and 128 columns differ 4x in cost, and a fixed striping left SMs
//          idle: ncu at eb4aa00 measured active cycles from 17% below to 10%
//          above the mean), and so do the light experts' narrow tiles,
//          whose CTAs start as the wide launch before them frees SMs, one
//          tile apart; other narrow tiles stripe items over CTAs (item +=
//          gridDim.x): their tiles are short and alike, and the hand-off
//          cost them 1-5% (A/B at f84921f). takes_items_from_queue,
//          launch.hpp.
//          Only real work exists; consecutive items share a job's
//          activations, and the jobs of one expert are adjacent, so its
//          weight tiles meet again in L2.
//          Which CTA computes a tile never changes what it computes, so the
//          outputs stay bit-identical from run to run.
// rect:    the grid is every expert x ceil(T / block_t) row tiles x n_tiles;
//          a CTA whose tile is empty exits at once. This is the baseline the
//          compact schedule replaces.
// Without classes both cut an expert's rows into the same block_t-row tiles
// of the same width, so a tile's arithmetic, and hence every output bit, is
// the same under either. With classes of experts (GemmParams::light_max_rows,
// broad_rows) a compact launch takes one class, a range of the job list,
// while rect runs without classes, one grid at the plan's tile: the tiles
// then differ, but none splits K and every width sums a row's K blocks in
// the same order, so the bits still agree (the classes' GPU tests).
#pragma once

#include <cstdint>

#include "cuda/gemm_params.hpp"
#include "cuda/pipeline_state.cuh"
#include "cuda/ptx/mbarrier.cuh"

namespace nvfp4moe::cuda {

struct WorkTile {
  int32_t expert, row_begin, num_rows, tile_rows, n_tile;
  int32_t k_split, k_begin, k_end;  // K range in 64-wide blocks
};

// Where a CTA's warps meet the compact schedule's items: one thread takes
// an item from the global TileQueue and publishes it here; every warp of the
// CTA reads the same sequence. Two slots, so the producer may run one tile
// ahead of the consumers.
// Lane 0 of each warp reads the slot, releases it and passes the item to
// its lanes by shuffle. NOTES: with every lane reading and lane 0 releasing
// after __syncwarp, racecheck reported the fetcher's next write against the
// other lanes' reads (docs/reliability.md: it does not order them through
// the warp barrier); a release by every thread (640 arrivals per item on
// the narrow tile, 384 on the wide one) ran 0.85-0.99x on both
// (bench/results/2026-12-01-h200-ab-light-experts-queue.json, variants).
struct ItemRing {
  int32_t item[2];
  uint64_t full[2];   // 1 arrival: the item is published
  uint64_t empty[2];  // one arrival per warp of the CTA: the slot is read
};

__device__ __forceinline__ void item_ring_init(ItemRing& r, uint32_t warps) {
  for (int i = 0; i < 2; ++i) {
    ptx::mbarrier_init(&r.full[i], 1);
    ptx::mbarrier_init(&r.empty[i], warps);
  }
}

// Items are (row tile, N tile, K split), the split fastest: the splits of
// one output tile and then its neighbours along N share the activation rows.
// Every warp of the CTA constructs one and calls next_tile() in step;
// `fetcher` marks the one thread that takes items from the queue when
// kTakeFromQueue and the grid is compact and persistent.
template <int kBlockT, int kChunks, bool kTakeFromQueue>
struct TileScheduler {
  const GemmParams& p;
  ItemRing& ring;
  bool queued;  // compact, persistent and kTakeFromQueue
  bool fetcher;
  int32_t n_tiles;
  int32_t per_row_tile;  // n_tiles * k_splits
  int32_t total;
  int32_t first_job;  // compact: the class's first job
  int32_t next;     // rect: this CTA's next item
  int32_t pending;  // compact, fetcher: the item taken for the next call
  PipelineState ring_state;

  __device__ TileScheduler(const GemmParams& params, ItemRing& item_ring, bool is_fetcher)
      : p(params),
        ring(item_ring),
        queued(kTakeFromQueue && params.schedule == Schedule::kCompact && !params.one_cta_per_item),
        fetcher(is_fetcher), n_tiles(params.n_tiles(kChunks)),
        per_row_tile(n_tiles * params.k_splits) {
    int32_t end_job = *p.num_jobs;
    first_job = 0;
    switch (p.expert_class) {
      case ExpertClass::kRegular: end_job = *p.broad_jobs_begin; break;
      case ExpertClass::kBroad: first_job = *p.broad_jobs_begin, end_job = *p.light_jobs_begin; break;
      case ExpertClass::kLight: first_job = *p.light_jobs_begin; break;
      default: break;
    }
    total = p.schedule == Schedule::kCompact ? (end_job - first_job) * per_row_tile
                                             : p.num_experts * p.rect_tiles_per_expert * per_row_tile;
    next = blockIdx.x;
    // The first item is the CTA's own index, the rest come from the queue
    // after the grid's first items: a CTA's first tile does not wait for
    // the atomic's round trip.
    pending = queued && fetcher ? int32_t(blockIdx.x) : 0;
  }

  // The next compact item for this warp, -1 when none is left. The fetcher
  // takes each item one tile ahead, so the atomic's round trip (~1 us) is
  // never waited for at a tile's start, where the producer's copies would
  // pause for it.
  __device__ int32_t take_item() {
    const int slot = ring_state.stage;
    const uint32_t phase = ring_state.phase;
    if (fetcher) {
      ptx::mbarrier_wait_parity(&ring.empty[slot], phase ^ 1u);
      int32_t item = pending;
      if (item < total) {
        pending = int32_t(gridDim.x) + atomicAdd(&p.queue->next, 1);
      } else {
        item = -1;
        // This CTA takes nothing more. The last CTA to get here finds every
        // other CTA's final take behind it and rewinds the queue for the
        // next launch (stream order puts that launch after this one).
        __threadfence();
        if (atomicAdd(&p.queue->done, 1u) == gridDim.x - 1) {
          atomicExch(&p.queue->next, 0);
          atomicExch(&p.queue->done, 0u);
        }
      }
      ring.item[slot] = item;
      ptx::mbarrier_arrive(&ring.full[slot]);
    }
    int32_t item = 0;
    if (threadIdx.x % 32 == 0) {
      ptx::mbarrier_wait_parity(&ring.full[slot], phase);
      item = ring.item[slot];
      ptx::mbarrier_arrive(&ring.empty[slot]);
    }
    item = __shfl_sync(0xFFFFFFFFu, item, 0);
    ring_state.advance<2>();
    return item;
  }

  __device__ bool next_tile(WorkTile& w) {
    while (true) {
      int32_t item;
      if (queued) {
        item = take_item();
      } else {
        item = next < total ? next : -1;
        next += gridDim.x;
      }
      if (item < 0) return false;
      const int32_t rest = item % per_row_tile;
      const int32_t n_tile = rest / p.k_splits, split = rest % p.k_splits;
      const int32_t k_blocks = p.k / 64, per_split = (k_blocks + p.k_splits - 1) / p.k_splits;
      const int32_t k_begin = split * per_split, k_end = min(k_blocks, k_begin + per_split);
      if (p.schedule == Schedule::kCompact) {
        const ExpertJob job = p.jobs[first_job + item / per_row_tile];
        w = {job.expert, job.row_begin, job.num_rows, job.tile_rows, n_tile, split, k_begin, k_end};
        return true;
      }
      const int32_t e = item / (p.rect_tiles_per_expert * per_row_tile);
      const int32_t tile = (item / per_row_tile) % p.rect_tiles_per_expert;
      const int32_t count = p.counts[e], rows = min(kBlockT, count - tile * kBlockT);
      if (rows <= 0) continue;  // the rectangular grid's empty tile
      w = {e, p.offsets[e] + tile * kBlockT, rows, job_tile_rows(rows, kBlockT), n_tile, split, k_begin, k_end};
      return true;
    }
  }
};

// Sorted row r's row of x or y, from its sorted_src entry src (read only
// where the map needs it).
__device__ __forceinline__ int64_t map_row_from(RowMap map, int32_t src, int32_t top_k, int32_t r) {
  switch (map) {
    case RowMap::kToken: return src / top_k;
    case RowMap::kPair: return src;
    default: return r;
  }
}

__device__ __forceinline__ int64_t map_row(RowMap map, const int32_t* sorted_src, int32_t top_k, int32_t r) {
  return map_row_from(map, map == RowMap::kCompact ? 0 : sorted_src[r], top_k, r);
}

}  // namespace nvfp4moe::cuda
