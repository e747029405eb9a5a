// sm90 grouped GEMM: NVFP4 weights x BF16 activations on wgmma.
//
// Roles (one CTA = kConsumers consumer warpgroups + 1 producer warpgroup;
// setmaxnreg moves registers from the producer to the consumers):
//   producer  (last warpgroup): per 64-wide K step, one thread bulk-copies
//             the tile's 2304-byte weight chunks; all 128 threads gather the
//             activation rows of the tile with cp.async through the
//             permutation (no permuted copy of X exists), 128-byte swizzled.
//   consumers (first kConsumers warpgroups): each owns kBlocks 64-row weight
//             chunks of the tile (tile height 64 * kChunks, kChunks =
//             kConsumers * kBlocks). Per chunk and K step it loads its A
//             fragment (16 B codes + 8 B scales), dequantizes it in registers
//             (dequant.cuh) and issues wgmma m64 x kBlockT x k16 with the
//             activation tile as B. A is double-buffered in registers so the
//             dequant of one fragment overlaps the tensor-core work of the
//             previous one.
// The weights are the wgmma M dimension and the tokens its N dimension
// ("swap AB"), so a tile can be as narrow as the routed rows need.
// Configurations (TileConfig): kBlockT = 128 (prefill) runs 2 consumers of
// 2 chunks each, a 256 x 128 tile: every activation byte fetched feeds twice
// the MMAs of a 128-row tile. kBlockT = 32 (small batches) and 64 (middle)
// run 4 consumers of one chunk, so more warps dequantize and stream weights
// per SM; the 32-token tile may split K (k_splits) when there are too few
// tiles to fill the GPU. choose_block_rows (ops.cu) picks the tile.
// Epilogue (epilogue.cuh), one kernel per EpiloguePath: accumulators ->
// alpha -> shared memory, transposed -> vector stores; F32 in one pass per
// chunk of each consumer, or BF16 rows in one pass (stmatrix), or, for the
// layer's gate_up, SwiGLU in registers and then BF16 rows of h.
// Schedule: scheduler.cuh.
#pragma once

#include <cstdint>

#include "cuda/dequant.cuh"
#include "cuda/epilogue.cuh"
#include "cuda/gemm_params.hpp"
#include "cuda/pipeline_state.cuh"
#include "cuda/ptx/async_copy.cuh"
#include "cuda/ptx/grid_dependency.cuh"
#include "cuda/ptx/mbarrier.cuh"
#include "cuda/ptx/mma.cuh"
#include "cuda/ptx/stmatrix.cuh"
#include "cuda/ptx/sync.cuh"
#include "cuda/ptx/wgmma.cuh"
#include "cuda/scheduler.cuh"
#include "nvfp4moe/layout.hpp"

namespace nvfp4moe::cuda::sm90 {

inline constexpr int kProducerThreads = 128;
inline constexpr int kKStep = 64;  // K per chunk and per fragment step
inline constexpr int kMinMmaWidth = 32;
// K blocks per pipeline stage, for every tile: one loop iteration, so one
// full-barrier wait, one release, one stage advance and one descriptor per 2
// (narrow, medium) or 4 (wide) fragment steps; an odd K range ends with a
// stage of one block. NOTES: H200 A/Bs: one K block per stage -> two ran
// 1.28-1.42x on narrow tiles, 1.10-1.14x on medium ones
// (bench/results/2026-11-30-h200-ab-5900092-two-k-blocks-per-stage.json;
// ncu: the consumers' full-barrier waits 27.5% -> 2.8% of stall samples),
// 1.018x on wide ones (...-ab-97ac1b6-wide-two-k-blocks-per-stage.json);
// four K blocks per narrow stage ran 0.95-1.16x (geomean ~1.0) before its
// tail was even written (...-ab-probe-four-steps-per-stage.json), and a tail
// of more than one block, written with branches, serializes the wgmmas.
inline constexpr int kStageBlocks = 2;

// kBlockT -> consumers, pipeline depth and consumer registers. NOTES:
// setmaxnreg only moves registers inside the CTA's launch allocation
// (threads x the __launch_bounds__ cap ptxas compiles to, 168 at 384 threads,
// 96 at 640): if the warpgroups ask for more in total, setmaxnreg.inc waits
// forever. register_budget_fits() below checks it at compile time.
template <int kBlockT>
struct TileConfig;
// NOTES: stage counts (of kStageBlocks K blocks each) fill the 227 KB of
// shared memory beside the epilogue tile. ncu of qwen3 gate_up T=2048 at 4
// wide stages of one K block: 40% of warp stalls were consumers waiting on a
// full barrier (activations still in flight).
template <> struct TileConfig<32> {
  static constexpr int kConsumers = 4, kBlocks = 1, kStages = 7, kProducerRegs = 56, kConsumerRegs = 104;
  static constexpr int kChunks = kConsumers * kBlocks;
};
// Medium: the narrow tile's four dequantizing warpgroups at twice its width,
// for experts of 33-64 rows, which would otherwise take two narrow tiles or
// one wide tile dequantized by two warpgroups. NOTES: ptxas serializes its
// wgmmas (C7512, the 32- and 64-wide paths at 104 registers); one 64-wide
// path at 112 registers compiles unserialized but ran 0.86-0.97x (A/B at
// a798b70): small tiles then pay for 64 columns.
template <> struct TileConfig<64> {
  static constexpr int kConsumers = 4, kBlocks = 1, kStages = 4, kProducerRegs = 56, kConsumerRegs = 104;
  static constexpr int kChunks = kConsumers * kBlocks;
};
// NOTES: at 40 registers the producer spills 20 bytes, in the per-tile
// set-up only (SASS), not in the K loop. Two chunks per consumer: the
// ablation at 44991fd (perf.md) put 28-39% of the 128 x 128 tile's time on
// the activation gather, which a 256-row tile halves per FLOP; the second
// accumulator set (64 more registers at n128) fits under the 232.
template <> struct TileConfig<128> {
  static constexpr int kConsumers = 2, kBlocks = 2, kStages = 3, kProducerRegs = 40, kConsumerRegs = 232;
  static constexpr int kChunks = kConsumers * kBlocks;
};
// Broad: the wide tile at 160 tokens, for the broad experts (takes_broad_tiles,
// plan.hpp), whose rows cost fewer 160-token tiles than 128-token tiles and a
// remainder that dequantizes the expert's weights again (129-160 rows, say).
// Three stages, as the wide tile has, beside an epilogue tile of half its
// tokens (two passes). One width only: beside a 128-wide path ptxas
// serializes its wgmmas (C7512). NOTES: H100, forced for every expert
// (bench/results/2026-12-07-h100-7204a7f-broad-tiles-deep.json): every
// expert at 160 rows ran qwen3 gate_up 200.0 us against 184.1 us at 128 rows
// in the wide tile, so a 160-wide K block cost 1.086x a 128-wide one (the
// cost model's 1.125x); with two stages and one epilogue pass (b97ec9b) it
// had cost 1.45x.
template <> struct TileConfig<160> {
  static constexpr int kConsumers = 2, kBlocks = 2, kStages = 3, kProducerRegs = 40, kConsumerRegs = 232;
  static constexpr int kChunks = kConsumers * kBlocks;
};

// The wgmma width a tile runs at: the narrowest of its kernel's widths that
// holds tile_rows (job_tile_rows, plan.hpp). The narrow kernel has 32,
// the medium one 32 and 64, the broad one 160, the wide one 32, 64 and 128, or with kWidth96
// 64, 96 and 128 (wide_tile_width_96, launch.hpp): a 65-96-row tile then
// pays for 96 columns instead of 128, a tile of at most 32 for 64 instead
// of 32. NOTES: a fourth width in the wide kernel (32, 64, 96 and 128) makes
// ptxas serialize its wgmmas (C7512), as a 16-wide one did.
template <int kBlockT, bool kWidth96>
__host__ __device__ constexpr int mma_width(int tile_rows) {
  static_assert(!kWidth96 || kBlockT == 128, "the 96-wide path is the wide kernel's");
  if constexpr (kBlockT == 160) return kBlockT;
  else if constexpr (kWidth96) return tile_rows <= 64 ? 64 : tile_rows <= 96 ? 96 : kBlockT;
  else return tile_rows <= kMinMmaWidth ? kMinMmaWidth : tile_rows <= 64 ? 64 : kBlockT;
}

template <int kBlockT>
struct SharedStorage {
  using Config = TileConfig<kBlockT>;
  static constexpr int kStages = Config::kStages;
  static_assert(kStageBlocks == 2 && Config::kBlocks <= 2,
                "a partial last stage is one K block, and a stage's fragment steps alternate between two register "
                "buffers");
  struct alignas(1024) Stage {
    uint16_t x[kStageBlocks][kBlockT * kKStep];  // per K block: [token][64] BF16, 128-byte swizzle
    // Per chunk, its K blocks adjacent as in the repacked weights (one copy).
    uint8_t w[Config::kChunks][kStageBlocks][kSm90ChunkBytes];
  };
  Stage stages[kStages];
  // The epilogue tile: F32, one chunk per consumer (one pass of kBlocks);
  // or BF16, every chunk of the tile (bf16_rows_epilogue, epilogue.cuh).
  static constexpr int kPassRows = 64 * Config::kConsumers;
  static constexpr int kTileStride = kPassRows + 4;  // +4 floats: conflict-free transposed writes
  static constexpr int kTileRows = 64 * Config::kChunks;
  // +8 elements: the 8 token rows of one stmatrix matrix fall in distinct
  // 16-byte bank groups.
  static constexpr int kBf16TileStride = kTileRows + 8;
  // Tokens per epilogue pass: the broad tile's 160 in two passes of 80, so
  // that its third pipeline stage fits beside the epilogue tile.
  static constexpr int kPassTokens = kBlockT > 128 ? kBlockT / 2 : kBlockT;
  union {
    float f32[kPassTokens * kTileStride];
    uint16_t bf16[kPassTokens * kBf16TileStride];
  } tile;
  static_assert(kBf16TileStride * 2 <= kTileStride * 4, "the BF16 tile fits in the F32 tile's bytes");
  alignas(16) EpilogueRows rows[kBlockT];  // entries read as 16-byte vectors (epilogue.cuh)
  ItemRing ring;
  uint64_t full[kStages];
  uint64_t empty[kStages];
};

template <int kBlockT>
constexpr int threads() {
  return 128 * TileConfig<kBlockT>::kConsumers + kProducerThreads;
}

// The per-thread register cap ptxas compiles a __launch_bounds__(threads, 1)
// kernel to: 64K registers shared by the threads, in multiples of 8.
constexpr int launch_register_cap(int num_threads) { return (65536 / num_threads) / 8 * 8; }

template <int kBlockT>
constexpr bool register_budget_fits() {
  using C = TileConfig<kBlockT>;
  return kProducerThreads * C::kProducerRegs + 128 * C::kConsumers * C::kConsumerRegs <=
         threads<kBlockT>() * launch_register_cap(threads<kBlockT>());
}
static_assert(register_budget_fits<32>() && register_budget_fits<64>() && register_budget_fits<128>() &&
                  register_budget_fits<160>(),
              "setmaxnreg requests exceed the CTA's launch register allocation: the kernel would hang");

template <int kBlockT>
constexpr size_t smem_bytes() {
  return sizeof(SharedStorage<kBlockT>) + 1024;  // +1024: manual alignment
}
// sm_90's opt-in dynamic shared memory limit per block.
inline constexpr size_t kMaxSmemPerBlock = 227 * 1024;
static_assert(smem_bytes<32>() <= kMaxSmemPerBlock && smem_bytes<64>() <= kMaxSmemPerBlock &&
                  smem_bytes<128>() <= kMaxSmemPerBlock && smem_bytes<160>() <= kMaxSmemPerBlock,
              "pipeline stages exceed the shared memory of an SM");

// The activation gather: kThreadsPerRow threads per 128-byte row, each
// thread kPieces 16-byte pieces of each of its kRowsPerThread rows, adjacent
// threads on adjacent pieces (every warp instruction reads whole 32-byte
// sectors). NOTES: with 8 threads per row each thread held 8 row addresses;
// at 40 registers ptxas re-derived them from the kernel parameters before
// every copy (an LDC, then the address, then the copy, in one chain) and
// spilled inside the K loop (SASS at 29a93ba), so the producer trailed the
// consumers: they waited for a full stage 23-38% of their loop cycles while
// the producer waited for an empty one 7-24% of its own (tile timeline).
template <int kBlockT>
struct GatherShape {
  // 160 rows: 4 threads per row, 5 rows each (2 would leave 2.5).
  static constexpr int kThreadsPerRow =
      kBlockT % kProducerThreads != 0 && kBlockT > kProducerThreads ? 4
      : kBlockT >= kProducerThreads / 2                               ? 2
                                                                      : kProducerThreads / kBlockT;
  static constexpr int kRowsPerThread = kBlockT * kThreadsPerRow / kProducerThreads;
  static constexpr int kRowsPerPass = kProducerThreads / kThreadsPerRow;
  static constexpr int kPieces = 8 / kThreadsPerRow;
  static_assert(kRowsPerThread >= 1 && kRowsPerThread * kRowsPerPass == kBlockT, "rows split evenly");
};

template <int kBlockT, bool kWidth96, bool kTakeFromQueue>
__device__ void producer(const GemmParams& p, SharedStorage<kBlockT>& s, int t) {
  constexpr int kStages = SharedStorage<kBlockT>::kStages;
  constexpr int kChunks = TileConfig<kBlockT>::kChunks;
  using G = GatherShape<kBlockT>;
  const int piece0 = t % G::kThreadsPerRow;
  const int k_blocks = p.k / kKStep;
  const int n_blocks = p.n / kSm90ChunkRows;
  TileScheduler<kBlockT, kChunks, kTakeFromQueue> sched(p, s.ring, t == 0);
  PipelineState ps;
  WorkTile w;
  while (sched.next_tile(w)) {
    const uint16_t* src[G::kRowsPerThread];
#pragma unroll
    for (int i = 0; i < G::kRowsPerThread; ++i) {
      const int row = t / G::kThreadsPerRow + G::kRowsPerPass * i;
      const int64_t xr = row < w.num_rows ? map_row(p.x_map, p.sorted_src, p.top_k, w.row_begin + row) : 0;
      src[i] = p.x + xr * p.x_stride + piece0 * 8;
    }
    const int width = mma_width<kBlockT, kWidth96>(w.tile_rows);
    const int nb0 = kChunks * w.n_tile;
    const int chunks = min(kChunks, n_blocks - nb0);
    const uint8_t* w0 = p.w_packed + (int64_t(w.expert) * n_blocks + nb0) * k_blocks * kSm90ChunkBytes;
    for (int kb = w.k_begin; kb < w.k_end; kb += kStageBlocks) {
      // The last stage of an odd K range holds one K block.
      const int blocks = min(kStageBlocks, w.k_end - kb);
      auto& st = s.stages[ps.stage];
      ptx::mbarrier_wait_parity(&s.empty[ps.stage], ps.phase ^ 1);
      if (t == 0) {
        // The consumers read the weights with ld.shared: ptx/sync.cuh.
        ptx::fence_proxy_async_shared();
        ptx::mbarrier_arrive_expect_tx(&s.full[ps.stage], chunks * blocks * kSm90ChunkBytes);
        for (int c = 0; c < chunks; ++c)
          ptx::bulk_copy_g2s(st.w[c][0], w0 + (int64_t(c) * k_blocks + kb) * kSm90ChunkBytes,
                             blocks * kSm90ChunkBytes, &s.full[ps.stage]);
      }
#pragma unroll
      for (int sb = 0; sb < kStageBlocks; ++sb) {
        if (sb >= blocks) break;
#pragma unroll
        for (int i = 0; i < G::kRowsPerThread; ++i) {
          const int row = t / G::kThreadsPerRow + G::kRowsPerPass * i;
          // Rows past the tile's wgmma width are never read; rows past its
          // count but inside the width are zero-filled.
          if (row < width) {
            char* dst_row = reinterpret_cast<char*>(st.x[sb]) + row * 128;
#pragma unroll
            for (int j = 0; j < G::kPieces; ++j) {
              const int piece = j * G::kThreadsPerRow + piece0;
              ptx::cp_async_16(dst_row + ((piece ^ (row & 7)) << 4),
                               src[i] + (kb + sb) * kKStep + j * G::kThreadsPerRow * 8, row < w.num_rows ? 16u : 0u);
            }
          }
        }
      }
      ptx::cp_async_mbarrier_arrive_noinc(&s.full[ps.stage]);
      ps.advance<kStages>();
    }
  }
  ptx::cp_async_wait_all();  // no copy may outlive its issuing thread
}

// The K loop of one tile at wgmma width kN (<= kBlockT), then the epilogue:
// per chunk of this consumer, alpha, the transposed store of the
// accumulators into s.tile, and the stores to global memory.
// chunks_active: how many of this consumer's chunks lie inside N (0: all
// past N, the K loop only keeps the pipeline in step).
// kPath: the epilogue (EpiloguePath, gemm_params.hpp), each a kernel of its
// own so that the F32 path's kernel stays as it was (A/B at ba0a7ee: with
// two epilogues in one kernel behind a runtime branch, the qwen3 layer,
// which never takes the new one, ran 3% slower).
// Chunk b of this warpgroup is chunk b * kConsumers + wg of the tile, or, on
// the SwiGLU rows path, wg * kBlocks + b: a gate chunk and the up chunk of
// the same features (gate_up's 64-row blocks alternate gate, up).
template <EpiloguePath kPath, int kBlocks, int kConsumers>
__device__ __forceinline__ int chunk_of(int b, int wg) {
  return kPath == EpiloguePath::kSwiGLURows ? wg * kBlocks + b : b * kConsumers + wg;
}

template <int kN, EpiloguePath kPath, int kBlockT>
__device__ __forceinline__ void mma_tile(const GemmParams& p, SharedStorage<kBlockT>& s, const WorkTile& w,
                                         int wg, int t, int chunks_active, PipelineState& ps) {
  using Mma = ptx::WgmmaBf16RS<kN>;
  using Config = TileConfig<kBlockT>;
  constexpr int kAcc = Mma::kAccumulators;
  constexpr int kBlocks = Config::kBlocks;
  constexpr int kStages = SharedStorage<kBlockT>::kStages;
  constexpr int kConsumerThreads = 128 * Config::kConsumers;
  const int warp = t / 32, lane = t % 32, g = lane / 4, q = lane % 4;
  static_assert(kBlockT <= kConsumerThreads, "one row-table entry per consumer thread");
  const RowSource row_source = load_row_source(p, w, wg * 128 + t);
  float acc[kBlocks][kAcc];
#pragma unroll
  for (int b = 0; b < kBlocks; ++b)
#pragma unroll
    for (int i = 0; i < kAcc; ++i) acc[b][i] = 0.0f;
  int prev_stage = -1;
  // Every consumer thread releases the stage it read: each thread's own
  // fragment loads come before its own arrive, an ordering racecheck can
  // check. NOTES: lane 0's arrive after __syncwarp was 1.3% faster at one
  // release per fragment step (A/B at 19f1520) and 1.004x at one per 2 or 4
  // (A/B at 8549926), and it draws racecheck reports on tests where this
  // form draws none (docs/reliability.md).
  auto release_previous = [&]() {
    if (prev_stage >= 0) ptx::mbarrier_arrive(&s.empty[prev_stage]);
    prev_stage = ps.stage;
    ps.advance<kStages>();
  };

  if (chunks_active > 0) {
    // NOTES: the loop has no data-dependent branch around its wgmmas, so
    // ptxas can prove every accumulator read is behind a wait and keeps
    // the wgmma pipeline unserialized.
    uint32_t a[2][4][4];
    uint64_t desc = 0;  // the stage's first K block of activations
    // One fragment step: chunk b of the stage's K block sb into register
    // buffer abuf, one commit group. The wait retires the previous group,
    // so the buffer the next step fills is free. The previous stage, whose
    // groups that wait has all retired, is released after the stage's last
    // step (last) in the narrow kernel, or elsewhere after its first: the
    // producer may refill it while the stage's other steps run.
    // NOTES: H200 A/Bs: in every kernel (c03f71c, bench/results/2026-12-02-
    // h200-ab-stage-release-after-first-step.json) it lost on narrow tiles
    // (qwen3 T = 16, 128 0.980-0.999x, deepseek gate_up T = 8 0.966x); at
    // width 128 only (707bdd5, …-ab-stage-release-width-128.json) qwen3 down
    // ran 1.025-1.027x and gate_up 1.013-1.014x at T = 2048, 8192; at the
    // wide kernel's 32 and 64 too (02eea55, …-ab-stage-release-wide-kernel.json)
    // 1.004-1.012x more where those widths run (qwen3 T = 1024, 2048, gpt-oss
    // T = 512); in the medium kernel (9a1f6c6, …-ab-stage-release-medium-
    // kernel.json) 0.994-1.015x, geomean 1.005x, at 32 rows per expert.
    auto fragment_step = [&](int sb, int b, uint32_t(&abuf)[4][4], bool last) {
      auto& st = s.stages[ps.stage];
      if (sb == 0 && b == 0) {
        ptx::mbarrier_wait_parity(&s.full[ps.stage], ps.phase);
        desc = ptx::smem_desc_kmajor_sw128_uniform(st.x[0]);
      }
      // A chunk past N reads this warpgroup's first chunk instead (a select,
      // not a branch: any branch here serializes the wgmmas, C7513); its
      // products are never stored.
      const int c = b < chunks_active ? chunk_of<kPath, kBlocks, Config::kConsumers>(b, wg)
                                      : chunk_of<kPath, kBlocks, Config::kConsumers>(0, wg);
      const FragmentRef f = fragment_ref(st.w[c][sb], t);
      dequant_fragment(*reinterpret_cast<const uint4*>(f.codes), *reinterpret_cast<const uint2*>(f.scales),
                       kScaleCodeMul, abuf);
      // The next K block's tile lies sizeof(st.x[0]) further: in desc units
      // (16 bytes) a constant, so no second shuffle.
      const uint64_t block_desc = desc + sb * (sizeof(st.x[0]) >> 4);
      ptx::wgmma_fence();
#pragma unroll
      for (int step = 0; step < 4; ++step) {
        // k16 step: +32 bytes along the swizzled row, i.e. +2 in desc units.
        // The accumulators start at zero, so every wgmma accumulates: a
        // first-step predicate cost an ISETP and a VOTEU per fragment step.
        Mma::mma(acc[b], abuf[step], block_desc + 2 * step, true);
      }
      ptx::wgmma_commit_group();
      ptx::wgmma_wait_group<1>();
      if constexpr (kBlockT != 32) {
        if (sb == 0 && b == 0 && prev_stage >= 0) ptx::mbarrier_arrive(&s.empty[prev_stage]);
        if (last) {
          prev_stage = ps.stage;
          ps.advance<kStages>();
        }
      } else if (last) {
        release_previous();
      }
    };
    // One stage per iteration, its fragment steps alternating between the
    // two static register buffers (an even count per stage).
    int kb = w.k_begin;
    for (; kb + kStageBlocks <= w.k_end; kb += kStageBlocks) {
#pragma unroll
      for (int sb = 0; sb < kStageBlocks; ++sb)
#pragma unroll
        for (int b = 0; b < kBlocks; ++b)
          fragment_step(sb, b, a[(sb * kBlocks + b) % 2], sb == kStageBlocks - 1 && b == kBlocks - 1);
    }
    if (kb < w.k_end) {  // the last stage of an odd K range holds one K block
#pragma unroll
      for (int b = 0; b < kBlocks; ++b) fragment_step(0, b, a[b % 2], b == kBlocks - 1);
    }
    ptx::wgmma_wait_group<0>();
#pragma unroll
    for (int b = 0; b < kBlocks; ++b) ptx::wgmma_fence_operands(acc[b]);
  } else {
    // This warpgroup's chunks are all past N (N % 128 == 64 at the end of
    // N): keep the pipeline bookkeeping in step with the producer and the
    // other warpgroups.
    for (int kb = w.k_begin; kb < w.k_end; kb += kStageBlocks) {
      ptx::mbarrier_wait_parity(&s.full[ps.stage], ps.phase);
      release_previous();
    }
  }
  ptx::mbarrier_arrive(&s.empty[prev_stage]);

  // Split K: raw partial sums; the reduction applies alpha once, in order.
  const float* alpha = (p.epilogue == EpilogueKind::kSwiGLU && wg % 2 == 1) ? p.alpha_up : p.alpha;
  const float scale = p.k_splits > 1 ? 1.0f : (alpha ? alpha[w.expert] : 1.0f) * kWeightDownscale;
  using Smem = SharedStorage<kBlockT>;
  // The epilogue tile holds Smem::kPassTokens tokens: every token of the
  // tile in one pass, or (the broad tile) half of them in each of two.
  constexpr int kTokenPasses = kBlockT / Smem::kPassTokens;
  constexpr int kPassGroups = kAcc / 4 / kTokenPasses;  // 8-token column groups per pass
  static_assert(kN % kTokenPasses == 0 && (kAcc / 4) % kTokenPasses == 0 && (kTokenPasses == 1 || kN == kBlockT),
                "a broad tile's passes split its one width evenly");
  // The tile of one token pass: its rows in the row table and the output.
  const auto token_pass = [&](int h) {
    WorkTile tp = w;
    tp.row_begin += h * Smem::kPassTokens;
    tp.num_rows = max(0, min(Smem::kPassTokens, w.num_rows - h * Smem::kPassTokens));
    return tp;
  };
  // Scaled, rounded and transposed into the BF16 tile by stmatrix, 4
  // matrices of 8 weight rows x 8 tokens per instruction: the values of
  // weight rows tile_row0 + warp * 16 + (0..15) of this consumer, for the
  // tokens of pass h.
  const auto stmatrix_bf16 = [&](const float(&v)[kAcc], float v_scale, int tile_row0, int h) {
    const int m = lane / 8, j = lane % 8;  // the matrix and token row this lane addresses
    const int tile_row = tile_row0 + warp * 16 + 8 * (m % 2);
    const uint32_t base = static_cast<uint32_t>(
        __cvta_generic_to_shared(s.tile.bf16 + (8 * (m / 2) + j) * Smem::kBf16TileStride + tile_row));
#pragma unroll
    for (int i = 0; i < kPassGroups; i += 2) {
      const float* a = v + 4 * (h * kPassGroups + i);
      ptx::stmatrix_x4_trans(base + i * 8 * Smem::kBf16TileStride * 2,
                             ptx::pack_bf16x2_rn(a[0] * v_scale, a[1] * v_scale),
                             ptx::pack_bf16x2_rn(a[2] * v_scale, a[3] * v_scale),
                             ptx::pack_bf16x2_rn(a[4] * v_scale, a[5] * v_scale),
                             ptx::pack_bf16x2_rn(a[6] * v_scale, a[7] * v_scale));
    }
  };
  if constexpr (kPath == EpiloguePath::kSwiGLURows) {
    // Gate and up of this warpgroup's 64 features activated in registers
    // (the F32 path's values, the same function), then per token pass h
    // rounded by stmatrix into a BF16 tile[token][128 features] and stored
    // as whole rows.
    static_assert(kBlocks == 2, "a gate and an up chunk per consumer");
    ptx::named_barrier_sync(1, kConsumerThreads);  // the previous tile's stores have read s.tile, s.rows
    epilogue_fill_rows(p, w, s.rows, row_source, wg * 128 + t);
    if (chunks_active == kBlocks)
      swiglu_in_place(p.act, acc[0], acc[1], (p.alpha ? p.alpha[w.expert] : 1.0f) * kWeightDownscale,
                      (p.alpha_up ? p.alpha_up[w.expert] : 1.0f) * kWeightDownscale);
#pragma unroll
    for (int h = 0; h < kTokenPasses; ++h) {
      if (h > 0) ptx::named_barrier_sync(1, kConsumerThreads);  // pass h - 1's stores have read s.tile
      if (chunks_active == kBlocks) stmatrix_bf16(acc[0], 1.0f, wg * 64, h);
      ptx::named_barrier_sync(1, kConsumerThreads);
      epilogue_store_bf16_rows<64 * Config::kConsumers, kConsumerThreads, kN / kTokenPasses>(
          p, token_pass(h), s.tile.bf16, Smem::kBf16TileStride, s.rows + h * Smem::kPassTokens, wg * 128 + t,
          p.n / 2);
    }
  } else if constexpr (kPath == EpiloguePath::kBf16Rows) {
    // Per token pass: every chunk into the BF16 tile, then whole output rows.
    ptx::named_barrier_sync(1, kConsumerThreads);  // the previous tile's stores have read s.tile, s.rows
    epilogue_fill_rows(p, w, s.rows, row_source, wg * 128 + t);
#pragma unroll
    for (int h = 0; h < kTokenPasses; ++h) {
      if (h > 0) ptx::named_barrier_sync(1, kConsumerThreads);  // pass h - 1's stores have read s.tile
#pragma unroll
      for (int b = 0; b < kBlocks; ++b)
        if (b < chunks_active) stmatrix_bf16(acc[b], scale, (b * Config::kConsumers + wg) * 64, h);
      ptx::named_barrier_sync(1, kConsumerThreads);
      epilogue_store_bf16_rows<Smem::kTileRows, kConsumerThreads, kN / kTokenPasses>(
          p, token_pass(h), s.tile.bf16, Smem::kBf16TileStride, s.rows + h * Smem::kPassTokens, wg * 128 + t, p.n);
    }
  } else {
    constexpr int kStride = SharedStorage<kBlockT>::kTileStride;
    const int row = wg * 64 + warp * 16 + g;
#pragma unroll
    for (int b = 0; b < kBlocks; ++b) {
#pragma unroll
      for (int h = 0; h < kTokenPasses; ++h) {
        // The previous pass's (or tile's) stores have read s.tile and s.rows.
        ptx::named_barrier_sync(1, kConsumerThreads);
        if (b == 0 && h == 0) epilogue_fill_rows(p, w, s.rows, row_source, wg * 128 + t);
        if (b < chunks_active) {
#pragma unroll
          for (int i = 0; i < kPassGroups; ++i) {
            const int col = 8 * i + 2 * q;  // the token, within the pass
            const float* a = acc[b] + 4 * (h * kPassGroups + i);
            s.tile.f32[col * kStride + row] = a[0] * scale;
            s.tile.f32[(col + 1) * kStride + row] = a[1] * scale;
            s.tile.f32[col * kStride + row + 8] = a[2] * scale;
            s.tile.f32[(col + 1) * kStride + row + 8] = a[3] * scale;
          }
        }
        ptx::named_barrier_sync(1, kConsumerThreads);
        // Pass b holds chunks b * kConsumers .. + kConsumers - 1: a tile of
        // kConsumers chunks, number n_tile * kBlocks + b, to the store.
        WorkTile pass = token_pass(h);
        pass.n_tile = w.n_tile * kBlocks + b;
        // The unrolled F32 rows (store_lane_rows) in the wide kernel only: in
        // the narrow and medium ones it ran the qwen3 layer at T = 512 0.98x
        // (bench/results/2026-12-02-h200-ab-f32-rows-loads-ahead-of-stores.json;
        // wide: gpt-oss layer T = 2048 1.025x, deepseek 1.014x).
        epilogue_store<Config::kConsumers, kConsumerThreads, (kBlockT >= 128 ? kN / kTokenPasses : 0)>(
            p, pass, s.tile.f32, kStride, s.rows + h * Smem::kPassTokens, wg * 128 + t);
      }
    }
  }
}

template <int kBlockT, EpiloguePath kPath, bool kWidth96, bool kTakeFromQueue>
__device__ void consumer(const GemmParams& p, SharedStorage<kBlockT>& s, int wg, int t) {
  using Config = TileConfig<kBlockT>;
  const int n_blocks = p.n / kSm90ChunkRows;
  TileScheduler<kBlockT, Config::kChunks, kTakeFromQueue> sched(p, s.ring, false);
  PipelineState ps;
  WorkTile w;
  while (sched.next_tile(w)) {
    // This warpgroup's chunks inside N (chunk_of). On the SwiGLU rows path
    // they are adjacent, and N % 128 == 0 makes their count 0 or 2.
    const int first = Config::kChunks * w.n_tile + chunk_of<kPath, Config::kBlocks, Config::kConsumers>(0, wg);
    const int chunks_active =
        kPath == EpiloguePath::kSwiGLURows
            ? max(0, min(Config::kBlocks, n_blocks - first))
            : max(0, min(Config::kBlocks, (n_blocks - first + Config::kConsumers - 1) / Config::kConsumers));
    // One branch per wgmma width (mma_width): the tile pays only for the
    // columns its rows need, and the choice is the same under both
    // schedules, so outputs stay bit-identical. NOTES: the narrowest is 32;
    // adding a 16-wide path to the 128 kernel makes ptxas serialize its
    // wgmmas for lack of registers (C7512).
    const int width = mma_width<kBlockT, kWidth96>(w.tile_rows);
    if constexpr (SharedStorage<kBlockT>::kPassTokens != kBlockT) {
      mma_tile<kBlockT, kPath>(p, s, w, wg, t, chunks_active, ps);  // the broad tile: its one width
    } else if (width == 32) {
      if constexpr (!kWidth96) mma_tile<32, kPath>(p, s, w, wg, t, chunks_active, ps);
    } else if (width == 64) {
      if constexpr (kBlockT >= 64) mma_tile<64, kPath>(p, s, w, wg, t, chunks_active, ps);
    } else if (width == 96) {
      if constexpr (kWidth96) mma_tile<96, kPath>(p, s, w, wg, t, chunks_active, ps);
    } else if constexpr (kBlockT >= 128) {
      mma_tile<kBlockT, kPath>(p, s, w, wg, t, chunks_active, ps);
    }
  }
}

// kTakeFromQueue: a persistent compact grid's CTAs take items from the
// TileQueue (takes_items_from_queue, launch.hpp); an instance of its own so
// that the other grids' kernels keep their code (the runtime choice in one
// kernel ran narrow tiles 0.98-0.99x: bench/results/2026-12-01-h200-ab-
// light-experts-queue.json).
template <int kBlockT, EpiloguePath kPath, bool kWidth96, bool kTakeFromQueue>
__global__ void __launch_bounds__(threads<kBlockT>(), 1) nvfp4_grouped_gemm_kernel(const __grid_constant__ GemmParams p) {
  using Config = TileConfig<kBlockT>;
  constexpr int kStages = Config::kStages;
  constexpr int kConsumerThreads = 128 * Config::kConsumers;
  // NOTES: the 1024-byte alignment (128-byte swizzle atoms) is reached by
  // offsetting the shared array itself, not by integer arithmetic on a
  // generic pointer: through a uintptr_t round trip ptxas loses the address
  // space and compiles every shared access to a generic LD.E/ST.E.
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  auto& s = *reinterpret_cast<SharedStorage<kBlockT>*>(smem_raw + ((1024 - (smem_base & 1023)) & 1023));
  // The light experts' launch may start beside this one (LaunchOrder).
  if (p.next_overlaps) ptx::launch_dependents();
  if (threadIdx.x == 0) {
    for (int i = 0; i < kStages; ++i) {
      ptx::mbarrier_init(&s.full[i], kProducerThreads + 1);  // cp.async arrivals + 1 expect_tx arrival
      ptx::mbarrier_init(&s.empty[i], kConsumerThreads);  // every consumer thread
    }
    item_ring_init(s.ring, threads<kBlockT>() / 32);
    ptx::fence_mbarrier_init();
  }
  __syncthreads();
  if (threadIdx.x >= kConsumerThreads) {
    ptx::setmaxnreg_dec<Config::kProducerRegs>();
    producer<kBlockT, kWidth96, kTakeFromQueue>(p, s, threadIdx.x - kConsumerThreads);
  } else {
    ptx::setmaxnreg_inc<Config::kConsumerRegs>();
    consumer<kBlockT, kPath, kWidth96, kTakeFromQueue>(p, s, threadIdx.x / 128, threadIdx.x % 128);
  }
  // Launched beside the previous GEMM: the next kernel in the stream waits
  // for this grid only, so it must not end before that one (nothing here
  // reads its output).
  if (p.overlaps_previous && blockIdx.x == 0 && threadIdx.x == 0) ptx::grid_dependency_wait();
}

}  // namespace nvfp4moe::cuda::sm90
