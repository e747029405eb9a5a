// Host packer for the sm90 weight layout (layout.hpp (c), sm90_fragment.hpp).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "format/sm90_fragment.hpp"
#include "nvfp4moe/layout.hpp"

namespace nvfp4moe {
namespace {

Status check_sm90_shape(int64_t num_experts, int64_t rows, int64_t cols) {
  if (num_experts <= 0) return invalid_argument("sm90 layout: num_experts = ", num_experts, " must be positive");
  if (rows <= 0 || rows % kSm90ChunkRows != 0)
    return invalid_argument("sm90 layout: N = ", rows, " must be a positive multiple of ", kSm90ChunkRows);
  if (cols <= 0 || cols % kSm90ChunkK != 0)
    return invalid_argument("sm90 layout: K = ", cols, " must be a positive multiple of ", kSm90ChunkK);
  const int64_t chunks_max = std::numeric_limits<int64_t>::max() / kSm90ChunkBytes;
  if (num_experts > chunks_max / (rows / kSm90ChunkRows) / (cols / kSm90ChunkK))
    return make_status(StatusCode::kOutOfRange, "sm90 layout: ", num_experts, " x ", rows, " x ", cols,
                       " overflows 64-bit sizes");
  return ok_status();
}

// Calls f(chunk_base_byte_offset, expert, row0, k0) for every chunk; row
// blocks are spread over threads (chunks are independent, so the bytes
// written do not depend on the thread count).
template <typename F>
void for_each_chunk(int64_t num_experts, int64_t rows, int64_t cols, F&& f) {
  const int64_t row_blocks = num_experts * (rows / kSm90ChunkRows);
  const int64_t k_blocks = cols / kSm90ChunkK;
  auto run = [&](int64_t first, int64_t step) {
    for (int64_t rb = first; rb < row_blocks; rb += step) {
      const int64_t e = rb / (rows / kSm90ChunkRows), r0 = (rb % (rows / kSm90ChunkRows)) * kSm90ChunkRows;
      for (int64_t kb = 0; kb < k_blocks; ++kb) f((rb * k_blocks + kb) * kSm90ChunkBytes, e, r0, kb * kSm90ChunkK);
    }
  };
  const int64_t work = row_blocks * k_blocks;
  const int64_t threads = std::min<int64_t>(std::max(1u, std::thread::hardware_concurrency()), work / 256 + 1);
  std::vector<std::thread> pool;
  for (int64_t t = 1; t < threads; ++t) pool.emplace_back(run, t, threads);
  run(0, threads);
  for (auto& t : pool) t.join();
}

}  // namespace

int64_t sm90_packed_bytes(int64_t num_experts, int64_t rows, int64_t cols) {
  if (!check_sm90_shape(num_experts, rows, cols).ok()) return -1;
  return num_experts * (rows / kSm90ChunkRows) * (cols / kSm90ChunkK) * kSm90ChunkBytes;
}

Status pack_sm90(const ExpertWeightsView& w, uint8_t* out) {
  NVFP4MOE_RETURN_IF_ERROR(check_sm90_shape(w.num_experts, w.rows, w.cols));
  if (!w.codes || !w.scales || !out) return invalid_argument("pack_sm90: null codes, scales or output pointer");
  // A NaN or negative scale has no scale code (sm90_fragment.hpp).
  NVFP4MOE_RETURN_IF_ERROR(validate_weights(w, "pack_sm90 weights"));
  const int64_t K = w.cols;
  for_each_chunk(w.num_experts, w.rows, K, [&](int64_t base, int64_t e, int64_t r0, int64_t k0) {
    uint32_t codes[sm90::kChunkCodeWords] = {};
    uint32_t scales[sm90::kChunkScaleWords] = {};
    for (int r = 0; r < kSm90ChunkRows; ++r) {
      const int64_t row = e * w.rows + r0 + r;
      const uint8_t* crow = w.codes + row * (K / 2);
      const uint8_t* srow = w.scales + row * (K / kScaleBlock);
      uint8_t scale_codes[kSm90ChunkK / kScaleBlock];
      for (int step = 0; step < kSm90ChunkK / kScaleBlock; ++step) {
        scale_codes[step] = sm90::scale_code(srow[k0 / kScaleBlock + step] & 0x7F);  // 0x80 is -0
        int word, byte;
        sm90::scale_slot(r, step, &word, &byte);
        scales[word] |= uint32_t(scale_codes[step]) << (8 * byte);
      }
      for (int k = 0; k < kSm90ChunkK; ++k) {
        const int64_t kg = k0 + k;
        // Every value of a zero-scale block is zero; its codes are stored
        // as +0 because scale code 0 still decodes to a non-zero factor.
        const uint32_t code = scale_codes[k / kScaleBlock] == 0 ? 0 : (crow[kg / 2] >> (4 * (kg % 2))) & 0xF;
        const sm90::FragmentSlot s = sm90::fragment_slot(r, k);
        codes[s.thread * 4 + s.step] |= sm90::place_code(code, sm90::nibble_bits(s.pair, s.half));
      }
    }
    std::memcpy(out + base, codes, sizeof(codes));
    std::memcpy(out + base + kSm90ChunkCodeBytes, scales, sizeof(scales));
  });
  return ok_status();
}

Status unpack_sm90(const uint8_t* packed, int64_t num_experts, int64_t rows, int64_t cols, uint8_t* codes_out,
                   uint8_t* scales_out) {
  NVFP4MOE_RETURN_IF_ERROR(check_sm90_shape(num_experts, rows, cols));
  if (!packed || !codes_out || !scales_out) return invalid_argument("unpack_sm90: null pointer");
  const int64_t K = cols;
  std::atomic<int64_t> bad_chunk{-1};
  for_each_chunk(num_experts, rows, K, [&](int64_t base, int64_t e, int64_t r0, int64_t k0) {
    uint32_t codes[sm90::kChunkCodeWords];
    uint32_t scales[sm90::kChunkScaleWords];
    std::memcpy(codes, packed + base, sizeof(codes));
    std::memcpy(scales, packed + base + kSm90ChunkCodeBytes, sizeof(scales));
    for (int r = 0; r < kSm90ChunkRows; ++r) {
      const int64_t row = e * rows + r0 + r;
      uint8_t* crow = codes_out + row * (K / 2);
      uint8_t* srow = scales_out + row * (K / kScaleBlock);
      std::memset(crow + k0 / 2, 0, kSm90ChunkK / 2);
      for (int k = 0; k < kSm90ChunkK; ++k) {
        const int64_t kg = k0 + k;
        const sm90::FragmentSlot s = sm90::fragment_slot(r, k);
        const uint32_t code = sm90::extract_code(codes[s.thread * 4 + s.step], sm90::nibble_bits(s.pair, s.half));
        crow[kg / 2] |= static_cast<uint8_t>(code << (4 * (kg % 2)));
      }
      for (int step = 0; step < kSm90ChunkK / kScaleBlock; ++step) {
        int word, byte;
        sm90::scale_slot(r, step, &word, &byte);
        uint8_t ue4m3 = 0;
        if (!sm90::ue4m3_from_scale_code(static_cast<uint8_t>(scales[word] >> (8 * byte)), &ue4m3)) {
          int64_t none = -1;
          bad_chunk.compare_exchange_strong(none, base / kSm90ChunkBytes);
        }
        srow[k0 / kScaleBlock + step] = ue4m3;
      }
    }
  });
  if (bad_chunk >= 0)
    return make_status(StatusCode::kFormatError, "unpack_sm90: chunk ", bad_chunk.load(),
                       " holds a byte that is not an sm90 scale code (not written by pack_sm90); the output is "
                       "incomplete");
  return ok_status();
}

}  // namespace nvfp4moe
