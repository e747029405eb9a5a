// Shared test helpers: logged random seeds, poison, NVFP4 random weights.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "nvfp4moe/format.hpp"

namespace nvfp4moe::testing {

// The BF16 bits of each value, rounded to nearest even (float_to_bf16).
inline std::vector<uint16_t> to_bf16(const std::vector<float>& x) {
  std::vector<uint16_t> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = float_to_bf16(x[i]);
  return out;
}

// A fresh seed per call, printed so a failure can be replayed with
// NVFP4MOE_TEST_SEED=<seed>.
inline uint64_t test_seed() {
  uint64_t seed;
  if (const char* env = std::getenv("NVFP4MOE_TEST_SEED")) {
    seed = std::strtoull(env, nullptr, 10);
  } else {
    seed = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  }
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::printf("[ seed     ] %s.%s NVFP4MOE_TEST_SEED=%llu\n", info ? info->test_suite_name() : "?",
              info ? info->name() : "?", static_cast<unsigned long long>(seed));
  return seed;
}

// The index of the first value that is not a BF16 value (low 16 bits set),
// or -1 when every value is one.
inline int64_t first_non_bf16(const std::vector<float>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &v[i], 4);
    if (bits & 0xFFFFu) return int64_t(i);
  }
  return -1;
}

inline int64_t count_nonzero(const std::vector<float>& v) {
  return std::count_if(v.begin(), v.end(), [](float x) { return x != 0.0f; });
}

inline void poison(std::vector<float>& v) { std::fill(v.begin(), v.end(), std::numeric_limits<float>::quiet_NaN()); }

inline std::vector<float> random_normal(std::mt19937_64& rng, size_t n, float stddev) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// ids [T][k]: each token picks k distinct experts uniformly at random.
inline std::vector<int32_t> random_ids(std::mt19937_64& rng, int64_t T, int64_t k, int64_t E) {
  std::vector<int32_t> ids(static_cast<size_t>(T * k));
  std::vector<int32_t> pool(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) pool[e] = static_cast<int32_t>(e);
    for (int64_t j = 0; j < k; ++j) {
      std::uniform_int_distribution<int64_t> pick(j, E - 1);
      std::swap(pool[j], pool[pick(rng)]);
      ids[t * k + j] = pool[j];
    }
  }
  return ids;
}

// As random_ids, but every token routes one of its k slots (at random) to
// expert `hot`, which then has T rows.
inline std::vector<int32_t> random_ids_with_hot_expert(std::mt19937_64& rng, int64_t T, int64_t k, int64_t E,
                                                       int32_t hot) {
  std::vector<int32_t> ids = random_ids(rng, T, k, E);
  for (int64_t t = 0; t < T; ++t) {
    int32_t* row = ids.data() + t * k;
    if (std::find(row, row + k, hot) != row + k) continue;
    std::uniform_int_distribution<int64_t> slot(0, k - 1);
    row[slot(rng)] = hot;
  }
  return ids;
}

}  // namespace nvfp4moe::testing
