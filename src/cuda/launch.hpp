// Host-side launchers of the CUDA backend's kernels (internal).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <utility>

#include "cuda/gemm_params.hpp"
#include "cuda/plan_kernels.cuh"
#include "nvfp4moe/layout.hpp"
#include "nvfp4moe/status.hpp"

namespace nvfp4moe::cuda {

// How a kernel follows the previous kernel in its stream. kOverlapPrevious
// is programmatic dependent launch: the kernel may be scheduled once every
// CTA of the previous kernel has executed ptx::launch_dependents(), and runs
// its set-up (barriers, id checks, weight copies) beside that kernel's tail.
// Only for a kernel that reads the previous kernel's output, and writes what
// that kernel reads, behind ptx::grid_dependency_wait(); whatever it reads
// before the wait must come from earlier work in the stream. Stream capture
// keeps the overlap in a CUDA graph (a programmatic edge).
// NVFP4MOE_SERIAL_LAUNCHES=1 launches every kernel in plain stream order
// (A/B runs, and the test that overlapped and serial results are equal).
enum class LaunchOrder { kAfterPrevious, kOverlapPrevious };

inline bool serial_launches_forced() {
  const char* env = std::getenv("NVFP4MOE_SERIAL_LAUNCHES");
  return env && env[0] == '1';
}

// cudaLaunchKernelEx with at most one launch attribute (nullptr: none).
template <typename... Params, typename... Args>
cudaError_t launch_kernel_with(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                               cudaLaunchAttribute* attribute, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attribute;
  config.numAttrs = attribute ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                          LaunchOrder order, Args&&... args) {
  cudaLaunchAttribute overlap = {};
  overlap.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  overlap.val.programmaticStreamSerializationAllowed = 1;
  const bool overlapped = order == LaunchOrder::kOverlapPrevious && !serial_launches_forced();
  return launch_kernel_with(kernel, grid, block, smem, stream, overlapped ? &overlap : nullptr,
                            std::forward<Args>(args)...);
}

// Token-tile heights with a compiled kernel.
inline constexpr int32_t kBlockTNarrow = 32;
inline constexpr int32_t kBlockTMedium = 64;
inline constexpr int32_t kBlockTWide = 128;
// The broad experts' tile (PlanOptions::broad_rows): the wide kernel at 160
// tokens, one wgmma width.
inline constexpr int32_t kBlockTBroad = 160;

// The grouped GEMM, and with p.k_splits > 1 the split-K reduction after it.
// NOTES: always in stream order. Overlapping the layer's down GEMM and the
// combine with their predecessors (a wait at the GEMM's start) measured
// 0.97-1.01x at T = 16-2048 (A/B at 2667b03 and 6a7ef2e): only the launch
// latency can overlap, as a GEMM CTA fills its SM.
Status launch_grouped_gemm(const GemmParams& p, int32_t block_t, int num_sms, cudaStream_t stream);
Status launch_reduce_split_k(const GemmParams& p, int num_sms, cudaStream_t stream);

// Host policy: the compact schedule's grid. At most max_jobs() jobs exist
// (each expert adds at most one partial tile to pairs / block_t full ones),
// so items_bound = (pairs / block_t + min(E, pairs)) x N tiles x K splits,
// known on the host before the plan runs. Up to one_shot_waves(block_t)
// grids of SMs, one CTA per item bound: the hardware hands each item to the
// first SM that frees, as in the rect grid, and the CTAs past the real item
// count exit at once. Beyond it, num_sms persistent CTAs walk the items.
// NOTES: mixtral down T = 512 (<= 256 items of ~180 us on 132 SMs) ran
// compact at 0.90-0.92x of rect (bench/results/2026-11-30-h200-f12513b-
// compact-rect-order.json): a persistent CTA takes its next item one tile
// ahead (or, for narrow tiles, by a fixed stride), not when it frees, so in
// a grid of 1-2 items per SM the second wave went to CTAs that were still
// busy. Five waves for wide tiles: mixtral down T = 2048 (640 items) then
// runs as rect does (1.006-1.01x, ...-2026-12-01-h200-ab-one-shot-waves-5
// .json and ...-ea36d8e-one-shot-waves-5.json). Two for the others: their
// items are short, and one CTA per item ran gpt-oss down T = 16 and 128
// (408 and 576 narrow items) 0.94-0.96x of the persistent stripe, which
// carries each CTA's set-up and pipeline across its items.
// Worked examples (132 SMs): mixtral down T = 512 (1024 pairs, E = 8, N =
// 4096 in 256-row tiles) -> (8 + 8) x 16 = 256 CTAs; mixtral down T = 2048
// -> (32 + 8) x 16 = 640 CTAs; qwen3 gate_up T = 2048 -> (128 + 128) x 6 =
// 1536 items -> 132 persistent CTAs.
inline constexpr int64_t one_shot_waves(int32_t block_t) { return block_t >= kBlockTWide ? 5 : 2; }
inline int64_t compact_items_bound(int64_t pairs, int64_t num_experts, int32_t block_t, int64_t n_tiles,
                                   int64_t k_splits) {
  return (pairs / block_t + std::min(num_experts, pairs)) * n_tiles * k_splits;
}
// The jobs bound of one class of experts (GemmParams::expert_class): a
// light expert has one job; a regular one more than light_max_rows rows, a
// broad one more than the plan's block_rows.
inline int64_t compact_class_jobs_bound(int64_t pairs, int64_t num_experts, int32_t block_t, ExpertClass c,
                                        int32_t light_max_rows, int32_t plan_block_rows) {
  switch (c) {
    case ExpertClass::kLight: return std::min(num_experts, pairs);
    case ExpertClass::kRegular: return pairs / block_t + std::min(num_experts, pairs / (int64_t(light_max_rows) + 1));
    case ExpertClass::kBroad: return pairs / block_t + std::min(num_experts, pairs / (int64_t(plan_block_rows) + 1));
    default: return compact_items_bound(pairs, num_experts, block_t, 1, 1);
  }
}
inline int64_t compact_grid_ctas(int64_t items_bound, int num_sms, int32_t block_t) {
  return items_bound <= one_shot_waves(block_t) * num_sms ? items_bound : num_sms;
}
// Host policy: whether a persistent compact grid's CTAs take items from the
// TileQueue as they come free rather than by a fixed stride (a kernel
// instance of its own, kTakeFromQueue). Wide tiles differ 4x in cost with
// their width; the light experts' narrow tiles, launched to overlap the wide
// launch, have CTAs that start up to a wide tile apart as it frees SMs, so
// a fixed share each left the early ones idle at the end. Other narrow and
// medium grids start together on tiles alike, and the hand-off cost them
// 1-5% (scheduler.cuh).
inline bool takes_items_from_queue(int32_t block_t, ExpertClass expert_class) {
  return block_t >= kBlockTWide || expert_class == ExpertClass::kLight;
}

// Host policy: whether the wide kernel runs its tiles at wgmma widths 64, 96
// and 128 rather than 32, 64 and 128 (mma_width, sm90/nvfp4_grouped_gemm.cuh;
// four widths serialize the wgmmas). A function of shapes only: the average
// rows per expert, pairs / num_experts. Near 64 of them, about half the
// experts have 65-96 rows, which pay for 96 columns instead of 128, and few
// tiles have 32 or fewer rows, which pay for 64 instead of 32.
// NVFP4MOE_WIDE_WIDTH_96 = 0 or 1 forces it, for experiments. NOTES: H100,
// one build, forced both ways (bench/results/2026-12-06-h100-ab-wide-width-
// 96.json): at 64 rows per expert with uniform routing 1.08-1.20x (deepseek
// T = 2048 down 1.20x, layer 1.09x; gpt-oss T = 512 1.11-1.16x; qwen3
// T = 1024 1.08-1.12x), with Zipf(1.2) 0.99-1.09x; qwen3 T = 2048 (128 rows)
// 0.98-1.01x, hence the upper bound. At the edges (...-h100-ab-wide-width-
// 96-bounds.json): 40 rows per expert 0.96-1.03x, 48 rows 0.92-0.97x on
// deepseek (both ops and routings) and 0.95-1.02x elsewhere, hence the lower
// bound; 112 rows 0.97-1.06x, too mixed to widen the upper one. Inside it,
// deepseek T = 3072 (96 rows) 1.09-1.12x and mixtral T = 256 1.09-1.19x with
// uniform routing, 0.96-1.03x with Zipf.
inline constexpr int64_t kWidth96MinAvgRows = 48, kWidth96MaxAvgRows = 96;
inline bool wide_tile_width_96(int64_t pairs, int64_t num_experts) {
  if (const char* forced = std::getenv("NVFP4MOE_WIDE_WIDTH_96")) return forced[0] == '1';
  return num_experts > 0 && pairs > kWidth96MinAvgRows * num_experts && pairs <= kWidth96MaxAvgRows * num_experts;
}

// K blocks cut into `splits` ranges of ceil(k_blocks / splits) with none
// empty: ceil(k_blocks / per) ranges (a consumer with an empty K range would
// release a stage it never took). Both K splits below use it.
inline int32_t splits_without_empty(int64_t k_blocks, int64_t splits) {
  const int64_t per = (k_blocks + splits - 1) / splits;
  return int32_t((k_blocks + per - 1) / per);
}
// A count (K splits, chunks, CTAs) forced by an experiments variable; 0 when
// unset or below 1.
inline int64_t forced_count(const char* variable) {
  const char* env = std::getenv(variable);
  const int forced = env ? std::atoi(env) : 0;
  return forced >= 1 ? forced : 0;
}

// Host policy: how many K splits a narrow-tile GEMM uses when fewer work
// items than half the SMs exist. A function of shapes only (never of the
// routing), so a given call always sums in the same order. Worked example,
// qwen3 gate_up at T = 1 (k = 8, N = 1536, K = 2048, 132 SMs): at most 8 jobs
// x 6 N tiles = 48 items < 66 -> min(ceil(132 / 48), 32 / 8) = 3 splits of 11
// K blocks; at T = 16 (<= 128 jobs x 6 = 768 items) -> 1. NVFP4MOE_K_SPLITS
// overrides it for experiments, on every tile (the wide and medium tiles
// write raw partial sums by the same F32 tile path). NOTES: wide and medium
// tiles do not split. Two splits where K >= 128 blocks and the items bound
// lies in (SMs, 2 SMs] (A/B, bench/results/2026-12-02-h200-ab-wide-tile-k-
// split-policy.json): mixtral down with Zipf(1.2) 1.06-1.15x at T = 128-512,
// but with uniform routing 0.91-0.94x at T = 128 and 384, whose items fill
// one wave, and the layer 0.90-0.98x at T = 384-512; geomean 1.001x.
int32_t choose_k_splits(int64_t num_tokens, int64_t top_k, int64_t num_experts, int64_t n, int64_t k,
                        int32_t block_t, int num_sms);

// The weight streamer (weight_streamer.cu) runs MUL_MAT_ID without a plan
// for T <= kStreamMaxTokens (use_weight_streamer): rows per expert never
// exceed T (an expert appears at most once per token), so up to T = 8 one
// n8 mma column set holds them all, and beyond it a CTA per row group of 8.
// NOTES: H200 (bench/results/2026-11-30-h200-7d269f0-streamer.json): it wins
// over plan + wgmma at T = 1, 2 on every preset (no plan launch); from T = 4
// the plan path streams more bytes per second (deepseek layer T = 4: 424 us
// against 401 us even unfused), so the cut was at 2. The kernel itself is
// written for up to 8. Again at 3d8f74f (streamer v3; A/B
// bench/results/2026-11-30-h200-ab-3d8f74f-stream-max-tokens-8.json): mixed
// at T = 3, 4 (0.86-1.46x), the plan path 1.0-2.2x faster at T = 8. After the
// streamer's loop and dequant got 1.06-1.21x faster (38acef0, 00bf211), the
// A/B at 6f2810d (bench/results/2026-11-30-h200-ab-6f2810d-stream-max-tokens-4.json):
// the streamer at T = 3, 4 is 1.28x faster (geomean; 0.95-1.72x over the 5
// presets' gate_up, down and layer), so the cut is at 4. T = 5-8 not measured
// since. Again after the narrow tile's two K blocks per stage (97ac1b6,
// bench/results/2026-11-30-h200-ab-97ac1b6-streamer-against-plan-path-T1-4.json):
// the streamer still wins at T = 1, 2; at T = 3, 4 the plan path wins on
// deepseek (1.05-1.18x) but loses on mixtral and gpt-oss (down to 0.76x), so
// the cut stays at 4. After the streamer's cp.async staging (8844338), the
// streamer at T = 5-8 against the plan path (bench/results/2026-12-01-h200-
// ab-stream-max-tokens-8.json): qwen3's small experts gain (layer 1.06-1.33x,
// down 1.09-1.22x, gate_up 0.92-1.26x, geomean 1.05x), where the plan's
// launch weighs on calls of 20-75 us; deepseek and mixtral's gate_up lose
// (0.71-0.94x), gpt-oss is mixed (0.78-1.22x). So T = 5-8 streams only
// experts of at most 4 M weights (qwen3: 3.1 M and 1.6 M;
// gpt-oss's down 8.3 M). After the two-chunk CTAs at any K (fc37ab1), the
// streamer for any expert at T = 5-8 against the plan path (probe, bench/
// results/2026-12-02-h200-ab-streamer-chunks-policy-and-any-expert-t8.json,
// in a graph): T = 5 1.08-1.24x on all but deepseek's gate_up (0.99x), T = 6
// 1.00-1.06x, T = 8 0.90-1.08x (gpt-oss down 0.90x, deepseek gate_up 0.95x);
// so any expert streams up to T = 6 (T = 7 not measured: it stages eight
// columns, as T = 8 does). With the rows in the ring (53d76d2, bc61fb1;
// bench/results/2026-12-03-h200-ab-streamer-ring-x.json, and with one
// release per slot ...-ab-streamer-one-release-staged-rows.json) T = 8 on
// deepseek, gpt-oss and mixtral ran 1.11-1.26x of the plan path (gate_up,
// down and layer), so any expert streams up to T = 8, and the line for
// small experts (4 M weights) went. T = 9-16: use_weight_streamer's NOTES.
inline constexpr int32_t kStreamMaxTokens = 16;
inline constexpr int32_t kStreamKernelMaxTokens = 16;
// The streamer's CTA validates the call's ids one per consumer thread.
inline constexpr int64_t kStreamMaxPairs = 256;
// Rows of a streamer CTA: one n8 column set of mma. An expert with more
// rows (T > 8) has a row group of up to 8 per CTA, each CTA streaming the
// expert's weights (weight_streamer.cu, step 2).
inline constexpr int32_t kStreamCtaRows = 8;
// Whether a call's experts may have more than one row group: the kernel
// instances of row groups, which never split K.
inline constexpr bool streamer_row_groups(int64_t num_tokens) { return num_tokens > kStreamCtaRows; }
// A ring of stages, up to 8 (weight_streamer_stages), each a stage's
// weights (kStreamStageWeightBytes) beside the expert's activation rows
// over the same K (weight_streamer_stage_bytes): a grid of more than two
// CTAs per SM gets as many as fit in kStreamSmallCtaBytes, so that three
// CTAs share an SM (four in kStreamFourCtaBytes, below, where the rows are
// staged whole); a smaller grid as many as fit in kStreamTwoCtaBytes,
// deeper per CTA. The activations travel with the weights, so no K is too
// long for shared memory. NOTES: H200 (ab.sh at 0d66d33 and at its
// successor): two CTAs of 8 stages per SM were no faster than the
// register-streaming v2, so bytes in flight were not the limit; three CTAs
// per SM were 5-20% faster where the grid fills them (more warps hide the
// consumers' LDS -> dequant -> mma chains), and 7% slower where it does not
// (gpt-oss down T=1: 180 CTAs on 132 SMs). Until the ring carried them, the
// activation rows were staged whole before the K loop (bit_ceil(T) x K BF16,
// up to 176 KB: mixtral's down took the plan path from T = 5, and long K
// split to let two CTAs share an SM).
inline constexpr size_t kStreamStageWeightBytes = 4 * kSm90ChunkBytes;  // 4 K blocks of 64 rows
inline constexpr size_t kStreamSmallCtaBytes = 60 * 1024;
inline constexpr size_t kStreamTwoCtaBytes = 96 * 1024;
// Four CTAs per SM (weight_streamer_ctas_per_sm): at T = 1 (each of the
// grid's CTAs works: a token's k ids name k experts), where the row is
// staged whole, the grid has more than three CTAs per SM and three slots fit
// beside the row in kStreamFourCtaBytes, as many slots as fit there.
// NOTES: H200 probe (bench/results/2026-12-04-h200-probe-streamer-four-
// ctas-per-sm.json, in a graph): four per SM for every grid of more than
// three ran deepseek gate_up T = 1 1.22x (512 CTAs: one wave of 528 instead
// of 1.29 waves of 396; two-chunk CTAs, 256 in one wave, 1.22x too but
// 0.57-0.93x on mixtral and qwen3), and lost where the ring carries the
// rows (mixtral down T = 4, 8 0.89x, 0.93x; qwen3 gate_up T = 8 0.91x). The
// A/B of four per SM for staged rows at any T (bench/results/2026-12-04-
// h200-ab-streamer-four-ctas-per-sm.json): T = 1 1.04-1.25x (deepseek
// gate_up 1.25x, down 1.12x, mixtral's layer 1.14x, F32 x up to 1.10x), none
// lost; T = 2-4 gained with uniform routing (qwen3 down T = 4 1.30x, mixtral
// gate_up T = 2 1.10x) and lost with Zipf (0.88-0.94x: mixtral gate_up T = 2,
// deepseek down T = 2, qwen3 down T = 4), whose few hit experts leave the
// grid's CTAs idle, and their shallower rings to the rest: the grid cannot
// tell the two apart, so from T = 2 three share an SM. The registers for
// four (__launch_bounds__ 4: 48-53, no spills) alone cost 0.97-1.01x where
// the grid stays at three, hence a kernel instance each.
// NVFP4MOE_STREAM_CTAS_PER_SM=3 keeps four from sharing an SM, for tests:
// the two instances give the same bits.
inline constexpr size_t kStreamFourCtaBytes = 45 * 1024;
// Bytes between a stage's activation rows: its K blocks (4 / chunks) of
// BF16 and 16 more, so that the eight rows an ldmatrix reads start in
// different banks.
inline constexpr size_t weight_streamer_x_pitch(int32_t chunks) { return size_t(4 / chunks) * 128 + 16; }
// One ring slot: the weights, then one row of x per token of the CTA's
// row group (an expert has at most T rows), in whole 128 B.
inline constexpr size_t weight_streamer_stage_bytes(int32_t chunks, int64_t num_tokens) {
  const int64_t rows = num_tokens < kStreamCtaRows ? num_tokens : kStreamCtaRows;
  return (kStreamStageWeightBytes + size_t(rows) * weight_streamer_x_pitch(chunks) + 127) / 128 * 128;
}
// Beside the ring, rows staged whole (staged_bytes; see
// streamer_staged_rows) come out of the same budget. The policy's four per
// SM (weight_streamer_four_per_sm) and the occupancy a launch gets, which
// NVFP4MOE_STREAM_CTAS_PER_SM=3 can hold at three without moving the chunk
// policy that reads the former.
bool weight_streamer_four_per_sm(size_t stage_bytes, size_t staged_bytes, int64_t grid_ctas, int64_t num_tokens,
                                 int num_sms);
int weight_streamer_ctas_per_sm(size_t stage_bytes, size_t staged_bytes, int64_t grid_ctas, int64_t num_tokens,
                                int num_sms);
int weight_streamer_stages(size_t stage_bytes, size_t staged_bytes, int ctas_per_sm);
// Bytes between staged rows of k_blocks K blocks: BF16 and 16 more, for
// the same banks as weight_streamer_x_pitch.
inline constexpr size_t weight_streamer_staged_pitch(int64_t k_blocks) { return size_t(k_blocks) * 128 + 16; }
// The activation rows whose copies a streamer's consumers stage whole in
// shared memory before their K loop, while the first stages of weights
// stream, instead of the ring carrying them (0: the ring carries them),
// where they leave four ring slots in kStreamTwoCtaBytes: BF16 up to
// kStreamStagedMaxTokens rows; one F32 row (T = 1), rounded to BF16 on the
// way (every load in flight at once); more F32 rows are converted by a
// kernel first, which the streamer overlaps. NOTES: H200 A/B
// (bench/results/2026-12-03-h200-ab-ring-x-producer-fixes.json): with the
// rows in the ring at every T, T = 1-4 ran 0.92-0.99x of the staged rows
// before it (deepseek gate_up T = 1 0.84x), T = 8 on large experts
// 1.13-1.23x. F32: with the conversion kernel at T = 1 too, F32 x ran
// 0.83-0.97x of the staged row (qwen3 layer 15.4 -> 18.5 us in a graph,
// bench/results/2026-12-03-h200-ab-streamer-ring-x.json); from T = 2 the
// conversion had already won (a1a520d, bench/results/
// 2026-12-01-h200-ab-f32-convert-before-streamer.json: 1.01-1.03x geomean).
inline constexpr int64_t kStreamStagedMaxTokens = 4;
inline int64_t streamer_staged_rows(int64_t num_tokens, int64_t k, bool x_f32) {
  const int64_t max_rows = x_f32 ? 1 : kStreamStagedMaxTokens;
  const bool fits = size_t(num_tokens) * weight_streamer_staged_pitch(k / 64) +
                        4 * weight_streamer_stage_bytes(1, 0) <=
                    kStreamTwoCtaBytes;
  return num_tokens >= 1 && num_tokens <= max_rows && fits ? num_tokens : 0;
}
// F32 activations the streamer takes as they are (streamer_staged_rows).
inline bool streamer_stages_f32_row(int64_t num_tokens, int64_t k) {
  return streamer_staged_rows(num_tokens, k, true) == 1;
}
// MUL_MAT_ID over T tokens with top_k of num_experts experts: every shape
// streams up to kStreamCtaRows tokens (its ring carries the rows of any K),
// and up to kStreamMaxTokens where the pairs number at most
// kStreamRowGroupPairsPerExpert per expert; never more than
// kStreamMaxPairs pairs. The layer streams both GEMMs or neither, by the
// same rule. NOTES: H200 A/B of row groups at T = 9-16 against the plan
// path (bench/results/2026-12-04-h200-ab-streamer-row-groups.json, in a
// graph): T = 9 1.18x geomean (1.05-1.29x), T = 12 1.11x, T = 16 1.08x;
// deepseek, gpt-oss and qwen3 gain at every T (deepseek gate_up T = 16
// 1.18-1.22x, gpt-oss layer 1.10-1.29x), except qwen3's down with Zipf at
// T = 12-16 (0.98-1.00x). Only mixtral (E = 8, k = 2) lost: at T = 16, 4
// pairs per expert, its down 0.90-0.94x and its Zipf gate_up and layer
// 0.93-0.97x, where the plan path's tile holds an expert's rows at one
// weight read; at T = 12, 3 per expert, 0.97-1.10x (geomean 1.02x); at T = 9
// 1.06-1.24x. A second column set per CTA instead of row groups (two CTAs
// per SM) ran T = 16 at 0.96x (...-ab-streamer-two-column-sets.json).
// Up to T = 32 under the same rule (f25d741, reverted; bench/results/
// 2026-12-06-h100-ab-streamer-row-groups-t32.json, H100, in a graph): 0.974x
// geomean; uniform deepseek 1.01-1.03x, but Zipf 0.77-0.95x from T = 20 on
// every preset and qwen3's down 0.86x at T = 32 with uniform routing: a hot
// expert's further row groups stream its weights again.
inline constexpr int64_t kStreamRowGroupPairsPerExpert = 3;
inline bool use_weight_streamer(int64_t num_tokens, int64_t top_k, int64_t num_experts) {
  const int64_t pairs = num_tokens * top_k;
  return num_tokens >= 1 && pairs <= kStreamMaxPairs &&
         (num_tokens <= kStreamCtaRows ||
          (num_tokens <= kStreamMaxTokens && pairs <= kStreamRowGroupPairsPerExpert * num_experts));
}
// A streamer launch's shape, as launch_weight_streamer sizes it: its CTAs,
// the K blocks of each split, its ring's slot size and stages, and the
// staged rows' pitch and bytes (staged_rows of the split's K, from
// streamer_staged_rows: the slots then hold no rows).
struct StreamerLaunchShape {
  int64_t ctas = 0, split_blocks = 0;
  size_t stage_bytes = 0, staged_pitch = 0, staged_bytes = 0;
  int stages = 0, ctas_per_sm = 0;
};
StreamerLaunchShape weight_streamer_launch_shape(int64_t n, int64_t k, int64_t num_tokens, int64_t top_k,
                                                 int32_t chunks, int32_t splits, int64_t staged_rows, int num_sms);
// Its grid: row blocks of N (weight_streamer_chunks) x pairs.
inline int64_t weight_streamer_ctas(int64_t n, int32_t chunks, int64_t num_tokens, int64_t top_k) {
  return n / (64 * chunks) * num_tokens * top_k;
}
// Chunks (64-row blocks of N) per CTA: two for SwiGLU (a gate block and its
// up block); where N holds whole pairs of blocks, also two where K is at
// most kStreamTwoChunkMaxK, or over at least kStreamTwoChunkMinTokens tokens
// where the two-chunk CTAs that can work (its K splits included: one per
// row block and hit expert, of which there are at most min(E, T * k)) still
// number kStreamTwoChunkMinWaves per SM, so that each CTA's fixed cost (the
// ids, the first bytes, the epilogue) covers twice the
// weights; at T = 1 where one-chunk CTAs would take more than one wave of
// four per SM and two-chunk ones take one (weight_streamer_four_per_sm);
// else one. A function of shapes, T and the SM count, never of the
// routing: one chunk deals a row's K blocks to two warps and adds their sums,
// two chunks sum them in one warp, so the two agree to fp32 rounding, not
// bit for bit.
// NOTES: qwen3's down (K = 768) is the shape the first line serves: 28 KB of
// weights per 64-row CTA. H200 sweep of forced one- and two-chunk CTAs
// (bench/results/2026-12-02-h200-sweep-streamer-chunks.json, in a graph):
// at T = 1 two chunks lost on all but deepseek's gate_up (1.02x): gpt-oss
// gate_up 0.89x (180 CTAs), mixtral gate_up 0.92x and deepseek down 0.95x
// (448 CTAs, a second partial wave where one chunk made 2.3 waves of three
// CTAs per SM), mixtral down 0.56x (64 CTAs); with T = 2-4 and at least two
// CTAs per SM they won: gpt-oss gate_up 1.05-1.08x, mixtral gate_up
// 1.07-1.08x, deepseek gate_up 1.03-1.07x and down 1.13-1.19x, mixtral down
// T = 4 1.11x (512 CTAs in two K splits; T = 3, 384 CTAs, 0.99x), qwen3
// gate_up T = 3-8 1.01-1.21x (and the 2026-12-02 two-chunk A/Bs); below two
// per SM they lost (qwen3 gate_up T = 2, 192 CTAs: 0.92x; mixtral down T = 2,
// 128: 0.82x). NVFP4MOE_STREAM_CHUNKS (1 or 2) overrides it for experiments
// where N holds whole pairs of blocks. Counting the grid instead (every
// pair's CTAs, most of which find their expert taken) put mixtral's down at
// T = 8 (8 experts, 256 working CTAs) in two chunks: 0.82x of the plan path
// (bench/results/2026-12-03-h200-ab-streamer-ring-x.json). With four CTAs
// per SM at T = 1 (probe, bench/results/2026-12-04-h200-probe-streamer-t1-
// two-chunks-four-per-sm.json, in a graph): two chunks ran deepseek's down
// 1.12x (896 one-chunk CTAs, 1.7 waves of four per SM, against 448 in one)
// and mixtral's gate_up 1.06x (the same counts); deepseek's gate_up (512
// one-chunk CTAs, one wave) 1.00x; where the two-chunk grid leaves SMs
// short of CTAs they lost as before (mixtral down 0.57x, gpt-oss gate_up
// 0.91x, qwen3 gate_up 0.94x).
inline constexpr int64_t kStreamTwoChunkMaxK = 1024, kStreamTwoChunkMinTokens = 2, kStreamTwoChunkMinWaves = 2;
inline int32_t weight_streamer_chunks(bool swiglu, int64_t n, int64_t k, int64_t num_tokens, int64_t top_k,
                                      int64_t num_experts, int32_t splits, int num_sms) {
  if (swiglu) return 2;
  if (n % 128 != 0) return 1;
  if (const int64_t forced = forced_count("NVFP4MOE_STREAM_CHUNKS")) return forced >= 2 ? 2 : 1;
  if (k <= kStreamTwoChunkMaxK) return 2;
  if (num_tokens == 1) {
    const StreamerLaunchShape two =
        weight_streamer_launch_shape(n, k, 1, top_k, 2, splits, streamer_staged_rows(1, k, false), num_sms);
    const int64_t wave = 4 * int64_t(num_sms);
    return 2 * two.ctas > wave && two.ctas <= wave &&
                   weight_streamer_four_per_sm(two.stage_bytes, two.staged_bytes, two.ctas, 1, num_sms)
               ? 2
               : 1;
  }
  const int64_t hit_bound = std::min(num_tokens * top_k, num_experts);
  return num_tokens >= kStreamTwoChunkMinTokens &&
                 n / 128 * hit_bound * splits >= kStreamTwoChunkMinWaves * int64_t(num_sms)
             ? 2
             : 1;
}
// Host policy: the streamer's K split: none. Each split CTA repeats the id
// check, the first-stage wait and the epilogue. NOTES: H200 sweep of forced
// splits 1, 2, 3, 4, 6 over the four presets' gate_up, down and layer at
// T = 1, 2, 4 (bench/results/2026-11-30-h200-stream-k-splits-sweep.json):
// splitting a grid that already fits lost everywhere (deepseek gate_up
// T = 1, 512 CTAs of 258 KB: 48.9 us unsplit, 55.3 / 60.5 us in 2 / 3
// splits; qwen3 down T = 1 9.2 -> 14.0 us), and the partial last wave was
// not the cost it seemed. Splits paid only where the whole K's staged
// activation rows left an SM to one CTA (mixtral down T = 4: 108.5 us
// unsplit, 88.5-90.3 us in 2-4 splits), which the ring's activation rows
// no longer do. NVFP4MOE_STREAM_SPLITS forces a split for experiments and
// tests; the kernel keeps its split form for them.
inline constexpr int32_t kMaxStreamSplits = 8;
int32_t choose_stream_splits(int64_t num_tokens, int64_t k);
// Whether a streamer of an n x k weight over T tokens should overlap its
// predecessor: where its grid has more CTAs than SMs, or where each CTA's
// whole weight slab fits its ring of stages (the slab is then in shared
// memory by the time the predecessor ends). NOTES: H200 (A/B at b36a5e3,
// bench/results/2026-11-30-h200-ab-b36a5e3-layer-overlap.json): the layer at
// T <= 4 gained 1.03-1.18x from the down streamer's overlap, except mixtral
// at T = 1, 0.90x, whose down grid is 128 CTAs of 516 KB of weights each. A
// grid of at most one CTA per SM launched onto an idle GPU gets one CTA per
// SM; launched early, its CTAs take the slots gate_up frees first, and an SM
// may get two (the likely cause, not measured). qwen3's down at T = 1 in
// two-chunk CTAs is also 128 CTAs, of 55 KB each, which their 74 KB ring
// holds: without the overlap its layer ran 0.945x
// (...-2026-12-01-h200-ab-stream-two-chunks-short-k.json).
bool streamer_overlap_pays(int64_t n, int64_t k, int64_t num_tokens, int64_t top_k, int64_t num_experts, int num_sms);
// Whether the decode layer stores its slot rows (pairs x cols values, each
// rounded to BF16) as F32 rather than BF16: the same values, so the same
// bits either way. NOTES: H100 (A/B of ece3bea against e5bfe9b,
// bench/results/2026-12-07-h100-ab-ece3bea-decode-slot-rows-f32-storage.json,
// in a graph): F32 storage ran qwen3's layer 1.012-1.015x at T = 1-2 and
// gpt-oss's 1.006-1.010x with Zipf routing, a fixed ~0.2 us that only the
// shortest layers feel; deepseek's T = 8-16 (0.46-0.92 M values) ran
// 0.994-0.998x, where twice the bytes cost more than that. Up to 2^18 values
// (1 MB as F32: qwen3, gpt-oss and mixtral to T = 16, deepseek to T = 4) every
// case ran within 0.3% of BF16 storage or faster.
inline constexpr int64_t kDecodeF32SlotValuesMax = int64_t(1) << 18;
inline bool decode_slot_rows_in_f32(int64_t pairs, int64_t cols) { return pairs * cols <= kDecodeF32SlotValuesMax; }
// With kOverlapPrevious the streamer reads the ids and router weights,
// checks them and streams its weights before it waits for the previous
// kernel; it waits before it stages the activations and before any write
// but the status word (the same value the previous streamer of these ids
// wrote).
Status launch_weight_streamer(const GemmParams& p, int num_sms, cudaStream_t stream, LaunchOrder order);

Status launch_build_plan(const int32_t* ids, int64_t num_tokens, int64_t top_k, int64_t num_experts,
                         int32_t block_rows, int32_t light_max_rows, int32_t broad_rows, const DevicePlan& plan,
                         cudaStream_t stream, bool next_overlaps = false);

// x (F32) -> BF16, n elements.
// next_overlaps: the next kernel is launched to overlap this one
// (LaunchOrder::kOverlapPrevious) and waits for its output; this kernel then
// lets it be scheduled at once. order kOverlapPrevious: the conversion runs
// beside the kernel before it (the plan, which reads nothing it writes) and
// does not end before that kernel, so the next kernel finds both done.
Status launch_f32_to_bf16(const float* x, uint16_t* y, int64_t n, cudaStream_t stream, bool next_overlaps = false,
                          LaunchOrder order = LaunchOrder::kAfterPrevious);
// out[t][:] = sum_j w[t*k + j] * y[t*k + j][:] in slot order
// (deterministic), F32; y: F32 or BF16 slot rows, w: route_w or 1 (nullptr).
// Writes nothing when *status holds an error (bad ids: y was never written).
// With kOverlapPrevious it waits before anything else.
Status launch_combine_slots(const void* y, DType y_dtype, const float* route_w, int64_t num_tokens, int64_t top_k,
                            int64_t cols, const PlanStatus* status, float* out, cudaStream_t stream,
                            LaunchOrder order);
// Unfused baseline passes (llama.cpp style): y[pair][:] *= alpha[ids[pair]] (* w[pair]).
// With alpha_up, odd 64-column blocks (interleaved up rows) take alpha_up.
// Does nothing when *status holds an error (the ids are not safe to index with).
Status launch_scale_pairs(float* y, const int32_t* ids, const float* alpha, const float* alpha_up,
                          const float* route_w, int64_t pairs, int64_t cols, const PlanStatus* status,
                          cudaStream_t stream);
// h[pair][f] = act(gu[pair][gate f], gu[pair][up f]) for the interleaved gate_up output, to BF16.
// Does nothing when *status holds an error.
Status launch_swiglu_pairs(const float* gate_up, int64_t pairs, int64_t ffn, const ActivationParams& act,
                           const PlanStatus* status, uint16_t* h, cudaStream_t stream);

}  // namespace nvfp4moe::cuda
