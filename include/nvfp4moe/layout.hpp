// Byte layouts of NVFP4 weights and lossless conversions to and from the
// canonical layout of format.hpp.
#pragma once

#include <cstdint>

#include "nvfp4moe/format.hpp"

namespace nvfp4moe {

// ---- (a) ggml block_nvfp4 ---------------------------------------------------
// 64 values in 36 bytes: d[4] UE4M3 (one per 16 values), then qs[32]. Sub-block
// s (values 16s .. 16s+15) lives in qs[8s .. 8s+7]; byte j of it holds value
// 16s+j in the low nibble and value 16s+j+8 in the high nibble.
// A ggml tensor of ne = [K, N, E] is E*N rows of K/64 blocks, row-major.
struct BlockNvfp4 {
  uint8_t d[4];
  uint8_t qs[32];
};
static_assert(sizeof(BlockNvfp4) == 36, "block_nvfp4 is 36 bytes: 4 scale bytes + 32 nibble bytes");
inline constexpr int kGgmlBlockValues = 64;

// rows x K values. K % 64 == 0.
Status ggml_to_canonical(const BlockNvfp4* blocks, int64_t rows, int64_t cols, uint8_t* codes, uint8_t* scales);
Status canonical_to_ggml(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols, BlockNvfp4* blocks);

// ---- (b) ModelOpt ------------------------------------------------------------
// weight uint8 [N, K/2] (element 2i low nibble), weight_scale float8_e4m3fn
// [N, K/16], weight_scale_2 FP32 scalar. This *is* the canonical layout, per
// expert; alpha = weight_scale_2 (times input_scale where the caller folds it).

// ---- (c) sm90 packed layout (see docs/design.md, "GPU weight layout") -------
// The Hopper mainloop dequantizes weights straight into wgmma A-operand
// registers. Weights are cut into chunks of 64 rows x 64 K; each chunk is
// 2304 contiguous bytes:
//   codes  [128 threads][4 k16-steps] uint32: the 8 nibbles a thread of the
//          consumer warpgroup needs for one m64k16 A fragment, bit-placed so
//          that each bf16x2 register is one shift and one mask away;
//   scales [4 warps][16 rows][4 k16-steps] scale codes: each UE4M3 scale
//          re-encoded (normalised exponent, 3-bit mantissa) so that the
//          device makes its bf16 factor with one integer multiply-add.
// Chunk order: [expert][row block (N/64)][k block (K/64)], so one row block's
// K stream is contiguous. Requires N % 64 == 0 and K % 64 == 0.
inline constexpr int kSm90ChunkRows = 64;
inline constexpr int kSm90ChunkK = 64;
inline constexpr int kSm90ChunkCodeBytes = kSm90ChunkRows * kSm90ChunkK / 2;              // 2048
inline constexpr int kSm90ChunkScaleBytes = kSm90ChunkRows * kSm90ChunkK / kScaleBlock;  // 256
inline constexpr int kSm90ChunkBytes = kSm90ChunkCodeBytes + kSm90ChunkScaleBytes;        // 2304
static_assert(kSm90ChunkBytes % 16 == 0, "sm90 chunks must stay 16-byte aligned for bulk copies");

int64_t sm90_packed_bytes(int64_t num_experts, int64_t rows, int64_t cols);
// Packs the canonical weights. out must hold sm90_packed_bytes() bytes.
// Runs validate_weights first (a NaN or negative scale has no scale code).
// Every value of a block whose scale is zero is zero, so its codes are
// stored as +0.
Status pack_sm90(const ExpertWeightsView& w, uint8_t* out);
// Inverse of pack_sm90 (for tests and for reading back): the same values,
// with the codes of zero-scale blocks as +0 and a -0 scale (0x80) as 0x00.
// kFormatError for bytes pack_sm90 never writes as scale codes.
Status unpack_sm90(const uint8_t* packed, int64_t num_experts, int64_t rows, int64_t cols, uint8_t* codes,
                   uint8_t* scales);

// The merged gate_up layout of the fused layer: rows are reordered in blocks
// of 64 so that row block 2i holds gate rows [64i, 64i+64) and row block 2i+1
// the matching up rows. One 128-row tile then yields gate and up of the same
// 64 features, and SwiGLU runs in the epilogue. gate and up are [E][F][K],
// F % 64 == 0; out gets [E][2F][K]. gate and up keep separate alphas, so
// out->alpha is left empty: the caller applies gate.alpha to the even row
// blocks and up.alpha to the odd ones (beware that out->view() reads an empty
// alpha as 1 for both halves).
Status interleave_gate_up(const ExpertWeightsView& gate, const ExpertWeightsView& up, ExpertWeights* out);

}  // namespace nvfp4moe
