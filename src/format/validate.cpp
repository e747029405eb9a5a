// validate_weights: the check every op runs on its weights. It has to be a
// cheap linear pass because it runs on every call over tensors of tens of MB.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>

#include "common/checks.hpp"
#include "format/weight_checks.hpp"
#include "nvfp4moe/format.hpp"

namespace nvfp4moe {
namespace detail {

Status check_weight_shape(int64_t num_experts, int64_t rows, int64_t cols, const char* name) {
  if (num_experts <= 0) return invalid_argument(name, ".num_experts = ", num_experts, " must be positive");
  if (rows <= 0) return invalid_argument(name, ".rows = ", rows, " must be positive");
  if (cols <= 0) return invalid_argument(name, ".cols = ", cols, " must be positive");
  if (cols % kKAlign != 0) {
    return invalid_argument(name, ".cols = ", cols, " is not a multiple of ", kKAlign);
  }
  // The largest buffer anyone derives from the shape is an F32 copy of the
  // dequantized weights, 4 bytes per element.
  constexpr int64_t kLimit = std::numeric_limits<int64_t>::max() / 4 <
                                     static_cast<int64_t>(std::numeric_limits<size_t>::max() / 4)
                                 ? std::numeric_limits<int64_t>::max() / 4
                                 : static_cast<int64_t>(std::numeric_limits<size_t>::max() / 4);
  int64_t elements = 0;
  if (__builtin_mul_overflow(num_experts, rows, &elements) || __builtin_mul_overflow(elements, cols, &elements) ||
      elements > kLimit) {
    return make_status(StatusCode::kOutOfRange, name, " has num_experts x rows x cols = ", num_experts, " x ", rows,
                       " x ", cols, " elements, more than this library can address");
  }
  return ok_status();
}

}  // namespace detail

namespace {

// A scale byte is unusable when it is the NaN pattern (0x7F, 0xFF) or carries
// the sign bit on a non-zero magnitude: float8_e4m3fn reads it as negative,
// and a ModelOpt checkpoint with a negative block scale is corrupt even though
// ggml would silently drop the sign. 0x80 (-0) is accepted as zero.
inline bool bad_scale_byte(uint8_t b) { return b == 0x7F || b > 0x80; }

// Branch-free over fixed-size chunks so the compiler vectorizes the inner
// loop; the chunk bound gives an early exit without costing the common case.
int64_t find_bad_scale(const uint8_t* scales, int64_t n) {
  constexpr int64_t kChunk = 16384;
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t end = begin + kChunk < n ? begin + kChunk : n;
    uint8_t any = 0;
    for (int64_t i = begin; i < end; ++i) {
      const uint8_t b = scales[i];
      any |= static_cast<uint8_t>((b == 0x7F) | (b > 0x80));
    }
    if (any) {
      for (int64_t i = begin; i < end; ++i) {
        if (bad_scale_byte(scales[i])) return i;
      }
    }
  }
  return -1;
}

std::string hex_byte(uint8_t b) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "0x%02X", static_cast<unsigned>(b));
  return buf;
}

}  // namespace

Status validate_weights(const ExpertWeightsView& w, const char* name) {
  if (name == nullptr) name = "weights";
  NVFP4MOE_RETURN_IF_ERROR(detail::check_weight_shape(w.num_experts, w.rows, w.cols, name));
  if (w.codes == nullptr) return invalid_argument(name, ".codes is null");
  if (w.scales == nullptr) return invalid_argument(name, ".scales is null");
  NVFP4MOE_RETURN_IF_ERROR(detail::check_aligned(w.alpha, alignof(float), (std::string(name) + ".alpha").c_str(), "F32"));

  const int64_t total_scales = w.num_experts * w.expert_scale_bytes();
  const int64_t bad = find_bad_scale(w.scales, total_scales);
  if (bad >= 0) {
    const uint8_t b = w.scales[bad];
    const int64_t per_row = w.row_scale_bytes();
    const int64_t expert = bad / w.expert_scale_bytes();
    const int64_t row = (bad % w.expert_scale_bytes()) / per_row;
    const int64_t block = bad % per_row;
    const char* what = (b & 0x7F) == 0x7F ? " is the UE4M3 NaN pattern (corrupt scale)"
                                          : " has the sign bit set (negative scale)";
    return make_status(StatusCode::kFormatError, name, ".scales[", expert, "][", row, "][", block,
                       "] = ", hex_byte(b), what, "; it scales ", name, "[", expert, "][", row, "][",
                       block * kScaleBlock, " .. ", block * kScaleBlock + kScaleBlock - 1, "]");
  }

  if (w.alpha != nullptr) {
    for (int64_t e = 0; e < w.num_experts; ++e) {
      const float a = w.alpha[e];
      if (!std::isfinite(a)) return make_status(StatusCode::kFormatError, name, ".alpha[", e, "] = ", a, " is not finite");
      if (a < 0.0f) return make_status(StatusCode::kFormatError, name, ".alpha[", e, "] = ", a, " is negative");
    }
  }
  return ok_status();
}

}  // namespace nvfp4moe
