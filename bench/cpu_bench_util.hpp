// Inputs for the CPU benchmarks: random NVFP4 weights made directly in the
// packed format (quantizing 400M floats would dominate start-up) and uniform
// top-k routing.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "nvfp4moe/format.hpp"

namespace nvfp4moe::bench {

// Every nibble is a valid E2M1 code; scales are drawn from UE4M3 bytes of
// 2^-4 .. 2^1 (never the NaN pattern) and alpha around 1/64, so outputs have
// magnitudes like a real layer's.
inline ExpertWeights random_weights(int64_t num_experts, int64_t rows, int64_t cols, uint64_t seed) {
  ExpertWeights w;
  w.num_experts = num_experts;
  w.rows = rows;
  w.cols = cols;
  w.codes.resize(static_cast<size_t>(num_experts * rows * cols / 2));
  w.scales.resize(static_cast<size_t>(num_experts * rows * cols / kScaleBlock));
  w.alpha.resize(static_cast<size_t>(num_experts));
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i < w.codes.size(); i += 8) {
    const uint64_t bits = rng();
    for (size_t b = 0; b < 8 && i + b < w.codes.size(); ++b) w.codes[i + b] = static_cast<uint8_t>(bits >> (8 * b));
  }
  std::uniform_int_distribution<int> scale_byte(0x18, 0x40);
  for (auto& s : w.scales) s = static_cast<uint8_t>(scale_byte(rng));
  std::uniform_real_distribution<float> alpha(0.01f, 0.02f);
  for (auto& a : w.alpha) a = alpha(rng);
  return w;
}

// ids [T][k]: k distinct experts per token, uniformly at random.
inline std::vector<int32_t> uniform_ids(int64_t T, int64_t k, int64_t E, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(T * k));
  std::vector<int32_t> pool(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) pool[e] = static_cast<int32_t>(e);
    for (int64_t j = 0; j < k; ++j) {
      std::swap(pool[j], pool[std::uniform_int_distribution<int64_t>(j, E - 1)(rng)]);
      ids[t * k + j] = pool[j];
    }
  }
  return ids;
}

inline std::vector<float> random_activations(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = d(rng);
  return x;
}

}  // namespace nvfp4moe::bench
