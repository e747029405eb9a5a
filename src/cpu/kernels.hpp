// CPU matmul kernels: one arithmetic, several instruction sets.
//
// Every output element of every CPU op is one dot product of a BF16-rounded
// activation row x and a dequantized weight row w (w = e2m1 * ue4m3, exact in
// F32), computed in this exact order, by one thread (the "canonical chain"):
//
//   The K axis is cut into chunks of 64. Inside a chunk, element
//   kChunkOrder[8 * v + l] is the v-th term (v = 0..7) of accumulator lane l
//   (l = 0..7). With a[0..7] = +0:
//     for each chunk, for v = 0..7, for each lane l:
//       a[l] = fma(x[k], w[k], a[l]),  k = 64 * chunk + kChunkOrder[8 * v + l]
//     sum = ((a0 + a4) + (a2 + a6)) + ((a1 + a5) + (a3 + a7))
//
// Because x * w is exact (8 + 6 significant bits), each fma rounds once, and
// the order is fixed, the scalar fallback, the AVX2 kernels and the AVX-512
// kernels give bit-identical sums, whatever the tile sizes, the thread count
// or the job schedule. The chunk order is the order in which the AVX2 decoder
// naturally produces weights from packed nibbles (see kernels_avx2.cpp), so
// the direct-from-codes path needs no shuffles beyond the decode itself.
// Activations and dequantized weight tiles are stored permuted the same way
// ("chunk order"), which makes the tiled kernels plain sequential streams.
#pragma once

#include <array>
#include <cstdint>

namespace nvfp4moe::cpu {

inline constexpr int kLanes = 8;
inline constexpr int kChunk = 64;
static_assert(kChunk == 64, "kChunk must equal kKAlign: every K is a whole number of chunks");

// Position 8 * v + l of a chunk -> K offset within the chunk.
//   k = 32 * (l / 4) + 16 * (v / 4) + 4 * (l % 4) + {0, 2, 1, 3}[v % 4]
constexpr std::array<uint8_t, kChunk> make_chunk_order() {
  std::array<uint8_t, kChunk> order{};
  constexpr int kOffset[4] = {0, 2, 1, 3};
  for (int v = 0; v < 8; ++v) {
    for (int l = 0; l < kLanes; ++l) {
      order[8 * v + l] = static_cast<uint8_t>(32 * (l / 4) + 16 * (v / 4) + 4 * (l % 4) + kOffset[v % 4]);
    }
  }
  return order;
}
inline constexpr std::array<uint8_t, kChunk> kChunkOrder = make_chunk_order();

// The inverse: K offset within a chunk -> position.
constexpr std::array<uint8_t, kChunk> make_chunk_position() {
  std::array<uint8_t, kChunk> position{};
  for (int i = 0; i < kChunk; ++i) position[kChunkOrder[i]] = static_cast<uint8_t>(i);
  return position;
}
inline constexpr std::array<uint8_t, kChunk> kChunkPosition = make_chunk_position();

// Where element k of a row lives in chunk order.
inline int64_t chunk_order_index(int64_t k) { return k - k % kChunk + kChunkPosition[k % kChunk]; }

// The weights of one projection of one expert, addressed by row.
struct WeightRows {
  const uint8_t* codes;   // row 0's codes; row n at codes + n * (K / 2)
  const uint8_t* scales;  // row 0's scales; row n at scales + n * (K / 16)
  int64_t cols;           // K
};

// The kernel set of one instruction set. All sizes in elements; K offsets and
// panel lengths are multiples of kChunk.
struct Kernels {
  const char* name;

  // Dequantizes rows [0, rows) of `w`, K range [k0, k0 + kp), into chunk
  // order: row n at tile + n * ld. Returns true if a scale byte in that range
  // is one validate_weights rejects (the op then reports the error).
  bool (*dequant_panel)(const WeightRows& w, int rows, int64_t k0, int64_t kp, float* tile, int64_t ld);

  // For r < num_x, n < rows: continues the canonical chain of (x[r], tile
  // row n) over kp elements. x[r] and tile (row n at tile + n * ld) point at
  // the panel start, in chunk order. partial[r][n][8] holds the lane
  // accumulators between panels: ignored when `first`; when `last` the
  // finished sums go to sums[r * sums_stride + n] instead.
  void (*gemm_panel)(const float* const* x, int num_x, const float* tile, int64_t ld, int rows, int64_t kp,
                     float* partial, bool first, bool last, float* sums, int64_t sums_stride);

  // The whole chain straight from the packed codes, for few activation rows
  // (num_x <= kMaxDirectRows): sums[r * sums_stride + n] for r < num_x,
  // n < rows. scratch holds at least kDirectGroup * K / 16 floats. Returns
  // true on a rejected scale byte, like dequant_panel.
  bool (*gemv_direct)(const WeightRows& w, int rows, const float* const* x, int num_x, float* sums,
                      int64_t sums_stride, float* scratch);
};

inline constexpr int kMaxDirectRows = 3;
inline constexpr int kDirectGroup = 8;  // weight rows decoded together by gemv_direct

// A scale byte validate_weights rejects: the NaN pattern or a negative value.
inline bool bad_scale_byte(uint8_t b) { return b == 0x7F || b > 0x80; }

const Kernels& scalar_kernels();
// nullptr when the build or the CPU lacks the instruction set.
const Kernels* avx2_kernels();
const Kernels* avx512_kernels();
// The fastest set this CPU runs (checked once with __builtin_cpu_supports).
const Kernels& best_kernels();

}  // namespace nvfp4moe::cpu
