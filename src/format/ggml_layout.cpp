// ggml block_nvfp4 <-> canonical (ModelOpt) layout. Both hold the same codes
// and scales; only the nibble placement differs:
//   canonical byte i of a row : value 2i (low nibble), value 2i+1 (high)
//   ggml qs[8s + j]           : value 16s+j (low),     value 16s+j+8 (high)
// so one 16-value sub-block is 8 bytes in both, and the conversion is a
// per-sub-block nibble shuffle. Scale bytes are copied as they are (the sign
// bit included), which keeps the round trip bit-exact.
#include <cstdint>
#include <cstring>

#include "nvfp4moe/layout.hpp"

namespace nvfp4moe {
namespace {

constexpr int kSubBlocks = kGgmlBlockValues / kScaleBlock;  // 4
constexpr int kSubBlockBytes = kScaleBlock / 2;             // 8

Status check_layout_args(const void* src, const void* codes, const void* scales, int64_t rows, int64_t cols,
                         const char* src_name) {
  if (src == nullptr) return invalid_argument(src_name, " is null");
  if (codes == nullptr) return invalid_argument("codes is null");
  if (scales == nullptr) return invalid_argument("scales is null");
  if (rows <= 0) return invalid_argument("rows = ", rows, " must be positive");
  if (cols <= 0) return invalid_argument("cols = ", cols, " must be positive");
  if (cols % kGgmlBlockValues != 0) {
    return invalid_argument("cols = ", cols, " is not a multiple of ", kGgmlBlockValues, " (block_nvfp4)");
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(rows, cols / kGgmlBlockValues * static_cast<int64_t>(sizeof(BlockNvfp4)), &bytes)) {
    return make_status(StatusCode::kOutOfRange, "rows x cols = ", rows, " x ", cols, " is too large");
  }
  return ok_status();
}

// 8 canonical bytes (values 2i, 2i+1 per byte) -> 8 ggml bytes (j, j+8).
inline void canonical_to_ggml_sub_block(const uint8_t* in, uint8_t* out) {
  uint8_t values[kScaleBlock];
  for (int i = 0; i < kSubBlockBytes; ++i) {
    values[2 * i] = in[i] & 0x0F;
    values[2 * i + 1] = in[i] >> 4;
  }
  for (int j = 0; j < kSubBlockBytes; ++j) {
    out[j] = static_cast<uint8_t>(values[j] | (values[j + kSubBlockBytes] << 4));
  }
}

inline void ggml_to_canonical_sub_block(const uint8_t* in, uint8_t* out) {
  uint8_t values[kScaleBlock];
  for (int j = 0; j < kSubBlockBytes; ++j) {
    values[j] = in[j] & 0x0F;
    values[j + kSubBlockBytes] = in[j] >> 4;
  }
  for (int i = 0; i < kSubBlockBytes; ++i) {
    out[i] = static_cast<uint8_t>(values[2 * i] | (values[2 * i + 1] << 4));
  }
}

}  // namespace

Status ggml_to_canonical(const BlockNvfp4* blocks, int64_t rows, int64_t cols, uint8_t* codes, uint8_t* scales) {
  NVFP4MOE_RETURN_IF_ERROR(check_layout_args(blocks, codes, scales, rows, cols, "blocks"));
  const int64_t total_blocks = rows * (cols / kGgmlBlockValues);
  // Rows are contiguous in both layouts, so the block index runs straight
  // through all rows: block b owns codes [32b, 32b+32) and scales [4b, 4b+4).
  for (int64_t b = 0; b < total_blocks; ++b) {
    const BlockNvfp4& blk = blocks[b];
    uint8_t* code_out = codes + b * (kGgmlBlockValues / 2);
    std::memcpy(scales + b * kSubBlocks, blk.d, kSubBlocks);
    for (int s = 0; s < kSubBlocks; ++s) {
      ggml_to_canonical_sub_block(blk.qs + s * kSubBlockBytes, code_out + s * kSubBlockBytes);
    }
  }
  return ok_status();
}

Status canonical_to_ggml(const uint8_t* codes, const uint8_t* scales, int64_t rows, int64_t cols, BlockNvfp4* blocks) {
  NVFP4MOE_RETURN_IF_ERROR(check_layout_args(blocks, codes, scales, rows, cols, "blocks"));
  const int64_t total_blocks = rows * (cols / kGgmlBlockValues);
  for (int64_t b = 0; b < total_blocks; ++b) {
    BlockNvfp4& blk = blocks[b];
    const uint8_t* code_in = codes + b * (kGgmlBlockValues / 2);
    std::memcpy(blk.d, scales + b * kSubBlocks, kSubBlocks);
    for (int s = 0; s < kSubBlocks; ++s) {
      canonical_to_ggml_sub_block(code_in + s * kSubBlockBytes, blk.qs + s * kSubBlockBytes);
    }
  }
  return ok_status();
}

}  // namespace nvfp4moe
