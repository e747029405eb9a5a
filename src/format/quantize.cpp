// Quantizer (F32/BF16 -> NVFP4, ModelOpt conventions) and exact dequantizer.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <new>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/checks.hpp"
#include "format/weight_checks.hpp"
#include "nvfp4moe/format.hpp"

namespace nvfp4moe {
namespace {

// ---- threading --------------------------------------------------------------

// Runs fn(begin, end) over [0, num_units) split into contiguous ranges, on up
// to hardware_concurrency threads when the work is large enough to pay for
// them. If a thread cannot be started its range runs on the calling thread,
// so the result never depends on thread creation succeeding.
template <typename Fn>
void parallel_for(int64_t num_units, int64_t work_per_unit, Fn fn) {
  constexpr int64_t kMinWorkPerThread = int64_t{1} << 18;
  const int64_t total_work = num_units * std::max<int64_t>(work_per_unit, 1);
  const int64_t hardware = std::max<int64_t>(std::thread::hardware_concurrency(), 1);
  const int64_t num_threads = std::clamp<int64_t>(total_work / kMinWorkPerThread, 1, std::min(hardware, num_units));
  if (num_threads <= 1) {
    fn(int64_t{0}, num_units);
    return;
  }
  std::vector<std::thread> threads;
  std::vector<std::pair<int64_t, int64_t>> inline_ranges;
  try {
    threads.reserve(static_cast<size_t>(num_threads - 1));
  } catch (...) {
  }
  const auto range_begin = [&](int64_t t) { return num_units * t / num_threads; };
  for (int64_t t = 1; t < num_threads; ++t) {
    const int64_t begin = range_begin(t), end = range_begin(t + 1);
    try {
      threads.emplace_back(fn, begin, end);
    } catch (...) {
      inline_ranges.emplace_back(begin, end);
    }
  }
  fn(range_begin(0), range_begin(1));
  for (const auto& [begin, end] : inline_ranges) fn(begin, end);
  for (auto& th : threads) th.join();
}

// ---- dequantization -----------------------------------------------------------

struct CodePair {
  float lo, hi;
};

// Byte -> the two E2M1 values it holds (element 2i low nibble, 2i+1 high).
const std::array<CodePair, 256>& code_pair_table() {
  static const std::array<CodePair, 256> table = [] {
    std::array<CodePair, 256> t{};
    for (int b = 0; b < 256; ++b) {
      t[b] = {e2m1_to_float(static_cast<uint8_t>(b & 0x0F)), e2m1_to_float(static_cast<uint8_t>(b >> 4))};
    }
    return t;
  }();
  return table;
}

// ---- quantization -------------------------------------------------------------

inline float load_f32(float x) { return x; }
inline float load_f32(uint16_t x) { return bf16_to_float(x); }

constexpr double kE2M1Magnitudes[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};

// Nearest E2M1 magnitude code of a >= 0 on the grid kE2M1Magnitudes * step,
// ties to the even code, saturating at 6 * step. The thresholds (midpoint *
// step) are exact in double: midpoints have <= 3 significant bits, step =
// UE4M3 (<= 4 bits) * alpha (24 bits), so the comparisons decide exactly,
// with none of the double rounding that dividing a by step first could add.
struct E2M1Grid {
  double step;
  double t[7];
  explicit E2M1Grid(double s)
      : step(s), t{0.25 * s, 0.75 * s, 1.25 * s, 1.75 * s, 2.5 * s, 3.5 * s, 5.0 * s} {}
  // Strict/non-strict alternate so that each tie lands on the even code:
  // 0.25 -> 0, 0.75 -> 2 (1.0), 1.25 -> 2, 1.75 -> 4 (2.0), 2.5 -> 4, 3.5 -> 6, 5 -> 6.
  int code(double a) const {
    return (a > t[0]) + (a >= t[1]) + (a > t[2]) + (a >= t[3]) + (a > t[4]) + (a >= t[5]) + (a > t[6]);
  }
};

// Squared error of the block x[0..16) with block step `step` (scale * alpha).
double block_error(const float* x, double step) {
  double err = 0.0;
  if (step == 0.0) {
    for (int i = 0; i < kScaleBlock; ++i) err += static_cast<double>(x[i]) * x[i];
    return err;
  }
  const E2M1Grid grid(step);
  for (int i = 0; i < kScaleBlock; ++i) {
    const double a = std::fabs(static_cast<double>(x[i]));
    const double d = a - kE2M1Magnitudes[grid.code(a)] * step;
    err += d * d;
  }
  return err;
}

// One row: x has `cols` finite values; writes cols/2 code bytes and cols/16
// scale bytes. The block scale is the least-squared-error choice among the
// round-to-nearest amax/6 scale and its two UE4M3 neighbours (0 included when
// the lower neighbour is 0); the plain rule's candidate is tried first and only
// a strictly better one replaces it, so the error is never above that rule's.
void quantize_row(const float* x, int64_t cols, double alpha, uint8_t* codes, uint8_t* scales) {
  for (int64_t blk = 0; blk < cols / kScaleBlock; ++blk) {
    const float* xb = x + blk * kScaleBlock;
    float amax = 0.0f;
    for (int i = 0; i < kScaleBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
    uint8_t* cb = codes + blk * (kScaleBlock / 2);
    if (amax == 0.0f) {
      scales[blk] = 0;
      std::fill(cb, cb + kScaleBlock / 2, uint8_t{0});
      continue;
    }
    const uint8_t plain = float_to_ue4m3(static_cast<float>(static_cast<double>(amax) / kE2M1Max / alpha));
    uint8_t best = plain;
    double best_err = block_error(xb, static_cast<double>(ue4m3_to_float(plain)) * alpha);
    for (const int candidate : {plain - 1, plain + 1}) {
      if (candidate < 0 || candidate > 0x7E) continue;
      const uint8_t c = static_cast<uint8_t>(candidate);
      const double err = block_error(xb, static_cast<double>(ue4m3_to_float(c)) * alpha);
      if (err < best_err) {
        best_err = err;
        best = c;
      }
    }
    scales[blk] = best;
    const double step = static_cast<double>(ue4m3_to_float(best)) * alpha;
    uint8_t nibbles[kScaleBlock];
    if (step == 0.0) {
      std::fill(nibbles, nibbles + kScaleBlock, uint8_t{0});
    } else {
      const E2M1Grid grid(step);
      for (int i = 0; i < kScaleBlock; ++i) {
        const int magnitude = grid.code(std::fabs(static_cast<double>(xb[i])));
        nibbles[i] = static_cast<uint8_t>(magnitude | (std::signbit(xb[i]) ? 0x8 : 0x0));
      }
    }
    for (int i = 0; i < kScaleBlock / 2; ++i) {
      cb[i] = static_cast<uint8_t>(nibbles[2 * i] | (nibbles[2 * i + 1] << 4));
    }
  }
}

template <typename T>
Status quantize_impl(const T* w, int64_t num_experts, int64_t rows, int64_t cols, const QuantizeOptions& opt,
                     ExpertWeights* out) {
  if (w == nullptr) return invalid_argument("w is null");
  if (out == nullptr) return invalid_argument("out is null");
  NVFP4MOE_RETURN_IF_ERROR(detail::check_aligned(w, alignof(T), "w", sizeof(T) == 2 ? "BF16" : "F32"));
  NVFP4MOE_RETURN_IF_ERROR(detail::check_weight_shape(num_experts, rows, cols, "w"));
  const int64_t num_rows = num_experts * rows;

  ExpertWeights result;
  std::vector<float> row_amax;
  std::vector<uint8_t> row_finite;
  std::vector<float> row_scratch;
  try {
    result.codes.resize(static_cast<size_t>(num_rows * (cols / 2)));
    result.scales.resize(static_cast<size_t>(num_rows * (cols / kScaleBlock)));
    result.alpha.resize(static_cast<size_t>(num_experts));
    row_amax.resize(static_cast<size_t>(num_rows));
    row_finite.resize(static_cast<size_t>(num_rows));
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, "quantize: cannot allocate the output for ", num_experts, " x ",
                       rows, " x ", cols, " weights");
  }

  // Pass 1: per-row amax and a finiteness flag, in parallel; the error then
  // names the first bad element in memory order, independent of threading.
  parallel_for(num_rows, cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* x = w + r * cols;
      float amax = 0.0f;
      bool finite = true;
      for (int64_t k = 0; k < cols; ++k) {
        const float v = load_f32(x[k]);
        finite &= std::isfinite(v);
        amax = std::max(amax, std::fabs(v));
      }
      row_amax[r] = amax;
      row_finite[r] = finite;
    }
  });
  for (int64_t r = 0; r < num_rows; ++r) {
    if (row_finite[r]) continue;
    for (int64_t k = 0; k < cols; ++k) {
      const float v = load_f32(w[r * cols + k]);
      if (!std::isfinite(v)) {
        return invalid_argument("w[", r / rows, "][", r % rows, "][", k, "] = ", v,
                                " is not finite; NVFP4 can only encode finite weights");
      }
    }
  }

  for (int64_t e = 0; e < num_experts; ++e) {
    float alpha = 1.0f;
    if (opt.global_scale) {
      const float amax = *std::max_element(row_amax.begin() + e * rows, row_amax.begin() + (e + 1) * rows);
      // An all-zero expert keeps alpha = 1 (any value works; 1 is neutral).
      // An amax so small that alpha underflows to 0 falls back to 1 too: its
      // weights then round to zero, which they are within F32 resolution.
      alpha = static_cast<float>(static_cast<double>(amax) / (static_cast<double>(kE2M1Max) * kUE4M3Max));
      if (!(alpha > 0.0f)) alpha = 1.0f;
    }
    result.alpha[static_cast<size_t>(e)] = alpha;
  }

  // Pass 2: quantize rows. BF16 rows are widened into a per-thread scratch
  // row (allocated inside the worker so that it cannot throw across threads;
  // an allocation failure is reported after the join).
  std::atomic<bool> out_of_memory{false};
  parallel_for(num_rows, cols, [&](int64_t begin, int64_t end) {
    std::vector<float> widened;
    if constexpr (!std::is_same_v<T, float>) {
      try {
        widened.resize(static_cast<size_t>(cols));
      } catch (const std::bad_alloc&) {
        out_of_memory.store(true);
        return;
      }
    }
    for (int64_t r = begin; r < end; ++r) {
      const float* x;
      if constexpr (std::is_same_v<T, float>) {
        x = w + r * cols;
      } else {
        for (int64_t k = 0; k < cols; ++k) widened[static_cast<size_t>(k)] = load_f32(w[r * cols + k]);
        x = widened.data();
      }
      quantize_row(x, cols, result.alpha[static_cast<size_t>(r / rows)], result.codes.data() + r * (cols / 2),
                   result.scales.data() + r * (cols / kScaleBlock));
    }
  });
  if (out_of_memory.load()) return make_status(StatusCode::kOutOfMemory, "quantize: cannot allocate a row buffer");

  result.num_experts = num_experts;
  result.rows = rows;
  result.cols = cols;
  *out = std::move(result);
  return ok_status();
}

}  // namespace

void dequantize_row(const uint8_t* codes, const uint8_t* scales, int64_t cols, float* out) {
  const auto& pairs = code_pair_table();
  for (int64_t blk = 0; blk < cols / kScaleBlock; ++blk) {
    const float scale = ue4m3_to_float(scales[blk]);
    const uint8_t* cb = codes + blk * (kScaleBlock / 2);
    float* ob = out + blk * kScaleBlock;
    for (int i = 0; i < kScaleBlock / 2; ++i) {
      const CodePair p = pairs[cb[i]];
      ob[2 * i] = p.lo * scale;  // exact: E2M1 * UE4M3 has <= 6 significant bits
      ob[2 * i + 1] = p.hi * scale;
    }
  }
}

Status dequantize_experts(const ExpertWeightsView& w, bool apply_alpha, float* out) {
  NVFP4MOE_RETURN_IF_ERROR(detail::check_weight_shape(w.num_experts, w.rows, w.cols, "w"));
  if (w.codes == nullptr) return invalid_argument("w.codes is null");
  if (w.scales == nullptr) return invalid_argument("w.scales is null");
  if (out == nullptr) return invalid_argument("out is null");
  NVFP4MOE_RETURN_IF_ERROR(detail::check_aligned(out, alignof(float), "out", "F32"));
  NVFP4MOE_RETURN_IF_ERROR(detail::check_aligned(w.alpha, alignof(float), "w.alpha", "F32"));
  const int64_t num_rows = w.num_experts * w.rows;
  parallel_for(num_rows, w.cols, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row_out = out + r * w.cols;
      dequantize_row(w.codes + r * w.row_code_bytes(), w.scales + r * w.row_scale_bytes(), w.cols, row_out);
      if (apply_alpha && w.alpha != nullptr) {
        const float alpha = w.alpha[r / w.rows];
        for (int64_t k = 0; k < w.cols; ++k) row_out[k] *= alpha;
      }
    }
  });
  return ok_status();
}

Status quantize_experts(const float* w, int64_t num_experts, int64_t rows, int64_t cols, const QuantizeOptions& opt,
                        ExpertWeights* out) {
  return quantize_impl(w, num_experts, rows, cols, opt, out);
}

Status quantize_experts_bf16(const uint16_t* w, int64_t num_experts, int64_t rows, int64_t cols,
                             const QuantizeOptions& opt, ExpertWeights* out) {
  return quantize_impl(w, num_experts, rows, cols, opt, out);
}

}  // namespace nvfp4moe
