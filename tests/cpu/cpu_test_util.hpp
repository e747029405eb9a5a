// Helpers shared by the CPU backend tests: small random NVFP4 weights and
// argument builders.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "nvfp4moe/format.hpp"
#include "nvfp4moe/ops.hpp"
#include "test_util.hpp"

namespace nvfp4moe::testing {

// Quantized from N(0, 1) values, ModelOpt two-level scaling (alpha != 1).
inline ExpertWeights quantized_weights(std::mt19937_64& rng, int64_t E, int64_t rows, int64_t cols) {
  const std::vector<float> w = random_normal(rng, static_cast<size_t>(E * rows * cols), 1.0f);
  ExpertWeights q;
  const Status s = quantize_experts(w.data(), E, rows, cols, QuantizeOptions{}, &q);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return q;
}

// Routing where every token's slots go to experts drawn from `allowed` only
// (distinct per token); allowed.size() >= k.
inline std::vector<int32_t> ids_from(std::mt19937_64& rng, int64_t T, int64_t k, std::vector<int32_t> allowed) {
  std::vector<int32_t> ids(static_cast<size_t>(T * k));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      std::uniform_int_distribution<size_t> pick(static_cast<size_t>(j), allowed.size() - 1);
      std::swap(allowed[j], allowed[pick(rng)]);
      ids[t * k + j] = allowed[j];
    }
  }
  return ids;
}

inline bool all_finite(const std::vector<float>& v) {
  for (float x : v) {
    if (!std::isfinite(x)) return false;
  }
  return true;
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace nvfp4moe::testing
