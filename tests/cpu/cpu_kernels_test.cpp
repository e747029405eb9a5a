// The CPU kernels against the canonical chain of kernels.hpp: the scalar set
// is checked against a direct transcription of the definition, and every
// vector set against the scalar one, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "cpu/kernels.hpp"
#include "cpu_test_util.hpp"
#include "nvfp4moe/format.hpp"

namespace nvfp4moe {
namespace {

using cpu::Kernels;
using cpu::kChunk;
using cpu::kChunkOrder;
using cpu::kLanes;
using testing::test_seed;

std::vector<const Kernels*> vector_kernel_sets() {
  std::vector<const Kernels*> sets;
  if (const Kernels* k = cpu::avx2_kernels()) sets.push_back(k);
  if (const Kernels* k = cpu::avx512_kernels()) sets.push_back(k);
  return sets;
}

// Random valid packed weights: any nibble, scale bytes 0x00..0x7E and 0x80.
struct PackedRows {
  int rows;
  int64_t cols;
  std::vector<uint8_t> codes, scales;
  cpu::WeightRows view() const { return {codes.data(), scales.data(), cols}; }
};

PackedRows random_packed(std::mt19937_64& rng, int rows, int64_t cols) {
  PackedRows p{rows, cols, std::vector<uint8_t>(rows * cols / 2), std::vector<uint8_t>(rows * cols / 16)};
  std::uniform_int_distribution<int> byte(0, 255), scale(0, 0x7F);
  for (auto& c : p.codes) c = static_cast<uint8_t>(byte(rng));
  for (auto& s : p.scales) {
    const int v = scale(rng);
    s = static_cast<uint8_t>(v == 0x7F ? 0x80 : v);
  }
  return p;
}

// BF16-valued activations in chunk order (any order works for the kernels).
std::vector<float> random_activation(std::mt19937_64& rng, int64_t cols) {
  std::vector<float> x = testing::random_normal(rng, cols, 1.0f);
  for (auto& v : x) v = round_to_bf16(v);
  return x;
}

// The canonical chain, written from its definition.
float canonical_dot(const float* x, const uint8_t* codes, const uint8_t* scales, int64_t cols) {
  float a[kLanes] = {};
  for (int64_t c = 0; c < cols; c += kChunk) {
    for (int v = 0; v < 8; ++v) {
      for (int l = 0; l < kLanes; ++l) {
        const int64_t k = c + kChunkOrder[8 * v + l];
        const uint8_t nibble = k % 2 ? codes[k / 2] >> 4 : codes[k / 2] & 0xF;
        const float w = e2m1_to_float(nibble) * ue4m3_to_float(scales[k / 16]);
        a[l] = std::fma(x[c + 8 * v + l], w, a[l]);
      }
    }
  }
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

TEST(CpuKernels, ChunkOrderIsAPermutationWithOneScaleBlockPerHalfVector) {
  std::vector<int> seen(kChunk, 0);
  for (int i = 0; i < kChunk; ++i) {
    ++seen[kChunkOrder[i]];
    EXPECT_EQ(cpu::kChunkPosition[kChunkOrder[i]], i);
  }
  for (int k = 0; k < kChunk; ++k) EXPECT_EQ(seen[k], 1) << "offset " << k;
  // Lanes 0-3 and 4-7 of each vector share a scale block: one scale per half.
  for (int v = 0; v < 8; ++v) {
    for (int l = 0; l < kLanes; ++l) EXPECT_EQ(kChunkOrder[8 * v + l] / 16, kChunkOrder[8 * v + (l / 4) * 4] / 16);
  }
  EXPECT_EQ(cpu::chunk_order_index(64 + kChunkOrder[5]), 64 + 5);
}

TEST(CpuKernels, ScalarDirectAndTiledMatchTheDefinition) {
  std::mt19937_64 rng(test_seed());
  const Kernels& k = cpu::scalar_kernels();
  const int rows = 5;
  const int64_t cols = 192;
  const PackedRows w = random_packed(rng, rows, cols);
  std::vector<std::vector<float>> xs;
  std::vector<const float*> xp;
  for (int r = 0; r < 3; ++r) xs.push_back(random_activation(rng, cols));
  for (auto& x : xs) xp.push_back(x.data());
  std::vector<float> direct(3 * rows), tiled(3 * rows), tile(rows * cols), partial(3 * rows * kLanes),
      scratch(cpu::kDirectGroup * cols / 16);
  EXPECT_FALSE(k.gemv_direct(w.view(), rows, xp.data(), 3, direct.data(), rows, scratch.data()));
  EXPECT_FALSE(k.dequant_panel(w.view(), rows, 0, cols, tile.data(), cols));
  k.gemm_panel(xp.data(), 3, tile.data(), cols, rows, cols, partial.data(), true, true, tiled.data(), rows);
  for (int r = 0; r < 3; ++r) {
    for (int n = 0; n < rows; ++n) {
      const float expect = canonical_dot(xs[r].data(), w.codes.data() + n * cols / 2, w.scales.data() + n * cols / 16, cols);
      EXPECT_EQ(direct[r * rows + n], expect) << "r " << r << " n " << n;
      EXPECT_EQ(tiled[r * rows + n], expect) << "r " << r << " n " << n;
    }
  }
}

TEST(CpuKernels, VectorDequantMatchesScalarForEveryScaleByte) {
  std::mt19937_64 rng(test_seed());
  const Kernels& ref = cpu::scalar_kernels();
  // One row per scale byte 0..255, every code in every row.
  const int rows = 256;
  const int64_t cols = 128;
  PackedRows w{rows, cols, std::vector<uint8_t>(rows * cols / 2), std::vector<uint8_t>(rows * cols / 16)};
  for (int r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < cols / 2; ++i) w.codes[r * cols / 2 + i] = static_cast<uint8_t>(i * 37 + r);
    for (int64_t b = 0; b < cols / 16; ++b) w.scales[r * cols / 16 + b] = static_cast<uint8_t>(b == 3 ? r : 0x38);
  }
  for (const Kernels* k : vector_kernel_sets()) {
    SCOPED_TRACE(k->name);
    for (int r = 0; r < rows; ++r) {
      const cpu::WeightRows row{w.codes.data() + r * cols / 2, w.scales.data() + r * cols / 16, cols};
      std::vector<float> expect(cols), got(cols);
      const bool bad_expect = ref.dequant_panel(row, 1, 0, cols, expect.data(), cols);
      const bool bad_got = k->dequant_panel(row, 1, 0, cols, got.data(), cols);
      EXPECT_EQ(bad_got, bad_expect) << "scale byte " << r;
      EXPECT_EQ(bad_got, r == 0x7F || r > 0x80) << "scale byte " << r;
      if (bad_expect) continue;  // the op reports an error; values do not matter
      EXPECT_TRUE(testing::bitwise_equal(got, expect)) << "scale byte " << r;
    }
  }
}

TEST(CpuKernels, VectorSetsMatchScalarBitwise) {
  const auto sets = vector_kernel_sets();
  if (sets.empty()) GTEST_SKIP() << "no vector instruction set on this CPU";
  std::mt19937_64 rng(test_seed());
  const Kernels& ref = cpu::scalar_kernels();
  // Every activation row count 1..13 (all remainders of the 4-, 6- and 3-row
  // blockings) against random tile shapes.
  for (int num_x = 1; num_x <= 13; ++num_x) {
    const int rows = std::uniform_int_distribution<int>(1, 13)(rng);
    const int64_t cols = 64 * std::uniform_int_distribution<int>(1, 20)(rng);
    const PackedRows w = random_packed(rng, rows, cols);
    std::vector<std::vector<float>> xs;
    std::vector<const float*> xp, xp_panel(num_x);
    for (int r = 0; r < num_x; ++r) xs.push_back(random_activation(rng, cols));
    for (auto& x : xs) xp.push_back(x.data());
    std::vector<float> scratch(cpu::kDirectGroup * cols / 16);

    // Tiled, in two panels when possible: exercises the partial accumulators;
    // a padded tile row stride exercises ld.
    auto tiled = [&](const Kernels& k) {
      const int64_t ld = cols + 64;
      std::vector<float> sums(num_x * rows), tile(rows * ld), partial(num_x * rows * kLanes);
      const int64_t split = cols > 64 ? 64 * (cols / 128) : cols;
      for (int64_t k0 = 0; k0 < cols; k0 = k0 == 0 ? split : cols) {
        const int64_t kp = k0 == 0 ? split : cols - split;
        EXPECT_FALSE(k.dequant_panel(w.view(), rows, k0, kp, tile.data(), ld));
        for (int r = 0; r < num_x; ++r) xp_panel[r] = xp[r] + k0;
        k.gemm_panel(xp_panel.data(), num_x, tile.data(), ld, rows, kp, partial.data(), k0 == 0, k0 + kp == cols,
                     sums.data(), rows);
      }
      return sums;
    };
    const std::vector<float> expect = tiled(ref);
    for (const Kernels* k : sets) {
      SCOPED_TRACE(std::string(k->name) + " rows " + std::to_string(rows) + " cols " + std::to_string(cols) +
                   " num_x " + std::to_string(num_x));
      EXPECT_TRUE(testing::bitwise_equal(tiled(*k), expect));
      if (num_x <= cpu::kMaxDirectRows) {
        std::vector<float> direct(num_x * rows);
        EXPECT_FALSE(k->gemv_direct(w.view(), rows, xp.data(), num_x, direct.data(), rows, scratch.data()));
        EXPECT_TRUE(testing::bitwise_equal(direct, expect));
      }
    }
  }
}

TEST(CpuKernels, RejectedScaleBytesAreFlaggedByEveryPath) {
  std::mt19937_64 rng(test_seed());
  const int rows = 6;
  const int64_t cols = 256;
  std::vector<const Kernels*> sets = vector_kernel_sets();
  sets.push_back(&cpu::scalar_kernels());
  for (uint8_t bad : {uint8_t{0x7F}, uint8_t{0xFF}, uint8_t{0x81}}) {
    PackedRows w = random_packed(rng, rows, cols);
    w.scales[4 * cols / 16 + 9] = bad;  // row 4, block 9
    const std::vector<float> x = random_activation(rng, cols);
    const float* xp[1] = {x.data()};
    std::vector<float> sums(rows), tile(rows * cols), scratch(cpu::kDirectGroup * cols / 16);
    for (const Kernels* k : sets) {
      SCOPED_TRACE(k->name);
      EXPECT_TRUE(k->gemv_direct(w.view(), rows, xp, 1, sums.data(), rows, scratch.data()));
      EXPECT_TRUE(k->dequant_panel(w.view(), rows, 0, cols, tile.data(), cols));
      EXPECT_FALSE(k->dequant_panel(w.view(), 4, 0, cols, tile.data(), cols)) << "rows 0-3 are clean";
    }
  }
}

}  // namespace
}  // namespace nvfp4moe
