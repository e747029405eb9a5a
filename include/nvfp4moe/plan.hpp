// Routing plan: from top-k expert ids to the compact worklist.
//
// ids [T][k] (int32) assign each (token t, slot j) pair to an expert. The plan
// groups the T*k pairs by expert:
//   counts[e]   pairs routed to expert e
//   offsets[e]  exclusive scan of counts (offsets[E] = T*k)
//   sorted_src  compact row r -> pair index t*k + j; stable, so within one
//               expert the tokens ascend (and for one token, the slots)
//   inverse     pair index t*k + j -> compact row r
//   jobs        ExpertJob tiles over the compact rows: each covers at most
//               block_rows consecutive rows of one expert. Only real work is
//               listed; an expert with no rows has no job. Jobs are ordered by
//               expert, then by row: expert e's rows [offsets[e], offsets[e+1])
//               are cut into tiles starting at offsets[e] + i * block_rows, all
//               full except possibly the last. With light_max_rows > 0
//               (PlanOptions), the jobs of light experts (1 .. light_max_rows
//               rows, one job each) follow all the others, again by expert;
//               with broad_rows > 0, the broad experts' (takes_broad_tiles)
//               come between, cut into broad_rows-row tiles. So jobs
//               [0, broad_jobs_begin) cut the regular experts' rows,
//               [broad_jobs_begin, light_jobs_begin) the broad ones' and
//               [light_jobs_begin, end) are the light experts' (the GPU runs
//               each range with its own token tile).
//   max_count   max over e of counts[e] (0 when T = 0)
// T = 0 is valid and gives an empty plan (counts and offsets all zero, no
// sorted rows, no jobs). T * k must fit in int32 (rows are int32 everywhere).
// This CPU builder is the mirror the CUDA plan kernels are tested against
// (bit-for-bit equal output). [TAG_WORKLIST_FORMAT]
#pragma once

#include <cstdint>
#include <vector>

#include "nvfp4moe/status.hpp"

namespace nvfp4moe {

// One tile of the compact schedule. 16 bytes; the same struct is used on the
// device. [TAG_WORKLIST_FORMAT]
struct ExpertJob {
  int32_t expert;
  int32_t row_begin;  // first compact row (index into sorted_src)
  int32_t num_rows;   // 1 .. block_rows
  int32_t tile_rows;  // tile height chosen for this job: job_tile_rows(num_rows, block_rows)
};
static_assert(sizeof(ExpertJob) == 16, "ExpertJob is 4 int32 fields; device code relies on it");

// Smallest tile height the kernels instantiate.
inline constexpr int32_t kMinTileRows = 16;
// Tile heights double up to kPow2TileRowsMax, then grow by kTileRowsStep: the
// wgmma widths the kernels instantiate are 32, 64, 96 and 128.
inline constexpr int32_t kPow2TileRowsMax = 64;
inline constexpr int32_t kTileRowsStep = 32;

// The tile height policy of a compact job: the smallest of 16, 32, 64, 96,
// 128, 160, ... (powers of two up to kPow2TileRowsMax, then multiples of
// kTileRowsStep) that is >= num_rows, capped at block_rows.
// E.g. block_rows = 128: 1 row -> 16, 17 -> 32, 65 -> 96, 100 -> 128;
// block_rows = 80: 70 -> 80; block_rows = 8: 1 -> 8. constexpr: the CUDA
// plan kernel and tile scheduler call the same function.
constexpr int32_t job_tile_rows(int32_t num_rows, int32_t block_rows) {
  int64_t tile = kMinTileRows;  // 64-bit: rounding up near INT32_MAX must not overflow
  while (tile < num_rows && tile < kPow2TileRowsMax) tile *= 2;
  if (tile < num_rows) tile = (int64_t(num_rows) + kTileRowsStep - 1) / kTileRowsStep * kTileRowsStep;
  return int32_t(tile < block_rows ? tile : block_rows);
}

// The tile cost model the broad class is chosen by: every tile streams and
// dequantizes its expert's weights over the whole K whatever its rows
// (kTileFixedUnits per K block, in units of one token column of the
// matmul) and multiplies them by tile_rows columns. On an H100 a 160-wide
// K block cost 1.086x a 128-wide one, where the model says 1.125x
// (docs/perf.md, Next item 12).
inline constexpr int64_t kTileFixedUnits = 128;

// Whether an expert of `rows` rows costs less cut into broad_rows-row tiles
// (one width, broad_rows) than into block_rows-row tiles and a remainder.
// E.g. block_rows = 128, broad_rows = 160: 129-160 rows (one tile of 288
// units against 256 + 128 + 16..32), 257-320, 385-480, 513-640; not 161-256
// (a 128-row tile and a remainder of 33-128) nor 512 (four full tiles,
// 1024 units against 1152).
// 32-bit divisions (on the device a 64-bit one by a runtime value is a
// call), 64-bit products.
constexpr bool takes_broad_tiles(int32_t rows, int32_t block_rows, int32_t broad_rows) {
  if (block_rows <= 0 || broad_rows <= block_rows || rows <= block_rows) return false;
  const int32_t broad_tiles = rows / broad_rows + (rows % broad_rows != 0);
  const int64_t broad = int64_t(broad_tiles) * (kTileFixedUnits + broad_rows);
  const int32_t rest = rows % block_rows;
  const int64_t regular = int64_t(rows / block_rows) * (kTileFixedUnits + block_rows) +
                          (rest > 0 ? kTileFixedUnits + job_tile_rows(rest, block_rows) : 0);
  return broad < regular;
}

struct PlanOptions {
  int32_t block_rows = 128;  // maximum rows of one job (the mainloop's token tile)
  // Experts with 1 .. light_max_rows rows are light: their jobs come last.
  // 0: no light experts (one range). At most block_rows.
  int32_t light_max_rows = 0;
  // Experts with takes_broad_tiles(rows, block_rows, broad_rows) are broad:
  // their jobs, of up to broad_rows rows, follow the regular experts'. 0: no
  // broad experts. Else more than block_rows.
  int32_t broad_rows = 0;
};

struct RoutingPlan {
  int32_t num_tokens = 0;   // T
  int32_t top_k = 0;        // k
  int32_t num_experts = 0;  // E
  int32_t block_rows = 0;
  int32_t light_max_rows = 0;
  int32_t broad_rows = 0;
  std::vector<int32_t> counts;      // [E]
  std::vector<int32_t> offsets;     // [E + 1]
  std::vector<int32_t> sorted_src;  // [T*k]
  std::vector<int32_t> inverse;     // [T*k]
  std::vector<ExpertJob> jobs;      // compact worklist
  int32_t broad_jobs_begin = 0;     // first broad expert's job; light_jobs_begin when none
  int32_t light_jobs_begin = 0;     // first light expert's job; jobs.size() when none
  int32_t max_count = 0;            // largest counts[e]
};

// Validates ids: every id in [0, E), no expert twice within one token's
// slots (top-k routing never repeats; a repeat means an upstream bug), T >= 0,
// 1 <= k <= E. The error names the first bad (t, j) and its value.
// Checked in this order: E > 0 (and fits int32), 1 <= k <= E, T >= 0,
// T * k <= INT32_MAX (kOutOfRange), ids non-null and 4-byte aligned when
// T > 0, then the ids in pair order t * k + j. A duplicate names both slots:
// "ids[t][i] and ids[t][j] are both expert e". ids may be null when T = 0.
Status validate_ids(const int32_t* ids, int64_t num_tokens, int64_t top_k, int64_t num_experts);

// block_rows > 0, 0 <= light_max_rows <= block_rows, and broad_rows = 0 or
// broad_rows > block_rows (kInvalidArgument).
Status validate_plan_options(const PlanOptions& opt);

// Validates ids (as above) and the options (validate_plan_options), then
// fills *out completely.
// On error *out is left untouched.
Status build_routing_plan(const int32_t* ids, int64_t num_tokens, int64_t top_k, int64_t num_experts,
                          const PlanOptions& opt, RoutingPlan* out);

// The rectangular enumeration kept for comparison: every expert times
// ceil(max_count / block_rows) tiles, empty ones included (num_rows may be 0).
// Ordered by expert, then tile i. Tile i of expert e covers compact rows from
// offsets[e] + min(i * block_rows, counts[e]), num_rows = the part of
// [i * block_rows, (i + 1) * block_rows) below counts[e] (so row_begin of an
// empty tile is offsets[e + 1], never another expert's row), and tile_rows =
// block_rows (the rectangular grid has one tile height). The non-empty tiles
// are exactly plan.jobs, apart from tile_rows. Empty for T = 0 (and if the
// allocation fails).
std::vector<ExpertJob> rect_jobs(const RoutingPlan& plan);

}  // namespace nvfp4moe
