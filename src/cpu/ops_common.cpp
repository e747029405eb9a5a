// Backend-independent parts of ops.hpp: names, argument validation, the
// activation and the error metric.
#include <cmath>
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>

#include "common/checks.hpp"
#include "cpu/ops_internal.hpp"
#include "format/weight_checks.hpp"
#include "nvfp4moe/ops.hpp"

namespace nvfp4moe {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
  }
  return "unknown";
}

const char* schedule_name(Schedule s) {
  switch (s) {
    case Schedule::kCompact: return "compact";
    case Schedule::kRect: return "rect";
  }
  return "unknown";
}

const char* activation_name(Activation a) {
  switch (a) {
    case Activation::kSwiGLU: return "swiglu";
    case Activation::kSwiGLUOai: return "swiglu_oai";
  }
  return "unknown";
}

namespace {

bool valid_dtype(DType t) { return t == DType::kF32 || t == DType::kBF16; }

Status check_weight_pointers(const ExpertWeightsView& w, const char* name) {
  NVFP4MOE_RETURN_IF_ERROR(detail::check_weight_shape(w.num_experts, w.rows, w.cols, name));
  if (w.codes == nullptr) return invalid_argument(name, ".codes is null");
  if (w.scales == nullptr) return invalid_argument(name, ".scales is null");
  return detail::check_aligned(w.alpha, alignof(float), (std::string(name) + ".alpha").c_str(), "F32");
}

Status check_x_aligned(const void* x, DType dtype) {
  return dtype == DType::kBF16 ? detail::check_aligned(x, alignof(uint16_t), "x", "BF16")
                               : detail::check_aligned(x, alignof(float), "x", "F32");
}

// a * b * c elements must be addressable as float (bytes in int64 and size_t).
Status check_buffer_elements(int64_t a, int64_t b, int64_t c, const char* what) {
  constexpr int64_t kLimit = std::numeric_limits<int64_t>::max() / 8;
  int64_t n = 0;
  if (__builtin_mul_overflow(a, b, &n) || __builtin_mul_overflow(n, c, &n) || n > kLimit ||
      static_cast<uint64_t>(n) > std::numeric_limits<size_t>::max() / 8) {
    return make_status(StatusCode::kOutOfRange, what, " has ", a, " x ", b, " x ", c,
                       " elements, more than this library can address");
  }
  return ok_status();
}

}  // namespace

Status validate_mul_mat_id(const MulMatIdArgs& a) {
  const ExpertWeightsView& w = a.weights;
  NVFP4MOE_RETURN_IF_ERROR(check_weight_pointers(w, "weights"));
  if (!valid_dtype(a.x_dtype)) return invalid_argument("x_dtype = ", static_cast<int>(a.x_dtype), " is not a DType");
  NVFP4MOE_RETURN_IF_ERROR(validate_ids(a.ids, a.num_tokens, a.top_k, w.num_experts));
  NVFP4MOE_RETURN_IF_ERROR(check_buffer_elements(a.num_tokens, a.top_k, w.rows, "y"));
  NVFP4MOE_RETURN_IF_ERROR(
      check_buffer_elements(a.num_tokens, a.x_per_slot ? a.top_k : 1, w.cols, "x"));
  if (a.num_tokens > 0) {
    if (a.x == nullptr) return invalid_argument("x is null but num_tokens = ", a.num_tokens);
    if (a.y == nullptr) return invalid_argument("y is null but num_tokens = ", a.num_tokens);
    NVFP4MOE_RETURN_IF_ERROR(check_x_aligned(a.x, a.x_dtype));
    NVFP4MOE_RETURN_IF_ERROR(detail::check_aligned(a.y, alignof(float), "y", "F32"));
  }
  return ok_status();
}

Status validate_moe_layer(const MoeLayerArgs& a) {
  const MoeLayerWeights& lw = a.weights;
  int64_t num_experts, ffn, hidden;
  if (lw.merged()) {
    NVFP4MOE_RETURN_IF_ERROR(check_weight_pointers(lw.gate_up, "gate_up"));
    if (lw.gate_up.rows % 2 != 0) {
      return invalid_argument("gate_up.rows = ", lw.gate_up.rows, " is odd; merged gate_up holds 2F rows");
    }
    num_experts = lw.gate_up.num_experts;
    ffn = lw.gate_up.rows / 2;
    hidden = lw.gate_up.cols;
  } else {
    NVFP4MOE_RETURN_IF_ERROR(check_weight_pointers(lw.gate, "gate"));
    NVFP4MOE_RETURN_IF_ERROR(check_weight_pointers(lw.up, "up"));
    if (lw.up.num_experts != lw.gate.num_experts || lw.up.rows != lw.gate.rows || lw.up.cols != lw.gate.cols) {
      return invalid_argument("up is [", lw.up.num_experts, "][", lw.up.rows, "][", lw.up.cols, "] but gate is [",
                              lw.gate.num_experts, "][", lw.gate.rows, "][", lw.gate.cols, "]; they must match");
    }
    num_experts = lw.gate.num_experts;
    ffn = lw.gate.rows;
    hidden = lw.gate.cols;
  }
  NVFP4MOE_RETURN_IF_ERROR(check_weight_pointers(lw.down, "down"));
  if (lw.down.num_experts != num_experts) {
    return invalid_argument("down.num_experts = ", lw.down.num_experts, " but gate/up have ", num_experts);
  }
  if (lw.down.cols != ffn) {
    return invalid_argument("down.cols = ", lw.down.cols, " must equal the FFN width F = ", ffn,
                            " (gate/up rows", lw.merged() ? " / 2" : "", ")");
  }
  if (lw.down.rows != hidden) {
    return invalid_argument("down.rows = ", lw.down.rows, " must equal the hidden size H = ", hidden,
                            " (gate/up cols, the width of x and out)");
  }
  if (!valid_dtype(a.x_dtype)) return invalid_argument("x_dtype = ", static_cast<int>(a.x_dtype), " is not a DType");
  switch (a.act.kind) {
    case Activation::kSwiGLU: break;
    case Activation::kSwiGLUOai:
      if (!std::isfinite(a.act.swiglu_alpha)) {
        return invalid_argument("act.swiglu_alpha = ", a.act.swiglu_alpha, " is not finite");
      }
      if (!(a.act.limit > 0.0f) || !std::isfinite(a.act.limit)) {
        return invalid_argument("act.limit = ", a.act.limit, " must be positive and finite");
      }
      break;
    default: return invalid_argument("act.kind = ", static_cast<int>(a.act.kind), " is not an Activation");
  }
  NVFP4MOE_RETURN_IF_ERROR(validate_ids(a.ids, a.num_tokens, a.top_k, num_experts));
  NVFP4MOE_RETURN_IF_ERROR(check_buffer_elements(a.num_tokens, a.top_k, std::max(ffn, hidden), "the layer's intermediate"));
  NVFP4MOE_RETURN_IF_ERROR(check_buffer_elements(a.num_tokens, 1, hidden, "x"));
  if (a.num_tokens > 0) {
    if (a.x == nullptr) return invalid_argument("x is null but num_tokens = ", a.num_tokens);
    if (a.out == nullptr) return invalid_argument("out is null but num_tokens = ", a.num_tokens);
    NVFP4MOE_RETURN_IF_ERROR(check_x_aligned(a.x, a.x_dtype));
    NVFP4MOE_RETURN_IF_ERROR(detail::check_aligned(a.out, alignof(float), "out", "F32"));
    NVFP4MOE_RETURN_IF_ERROR(detail::check_aligned(a.route_weights, alignof(float), "route_weights", "F32"));
  }
  return ok_status();
}

namespace detail {

Status check_alpha(const ExpertWeightsView& w, const char* name) {
  if (w.alpha == nullptr) return ok_status();
  for (int64_t e = 0; e < w.num_experts; ++e) {
    const float a = w.alpha[e];
    if (!std::isfinite(a) || a < 0.0f) {
      return make_status(StatusCode::kFormatError, name, ".alpha[", e, "] = ", a,
                         std::isfinite(a) ? " is negative" : " is not finite");
    }
  }
  return ok_status();
}

}  // namespace detail

float apply_activation(const ActivationParams& p, float gate, float up) {
  if (p.kind == Activation::kSwiGLUOai) {
    const float g = gate > p.limit ? p.limit : gate;  // NaN stays NaN
    const float u = std::isnan(up) ? up : (up < -p.limit ? -p.limit : (up > p.limit ? p.limit : up));
    const float sig = 1.0f / (1.0f + std::exp(-p.swiglu_alpha * g));
    return (u + 1.0f) * (g * sig);
  }
  return (gate / (1.0f + std::exp(-gate))) * up;
}

double apply_activation_f64(const ActivationParams& p, double gate, double up) {
  if (p.kind == Activation::kSwiGLUOai) {
    const double limit = p.limit;
    const double g = gate > limit ? limit : gate;
    const double u = std::isnan(up) ? up : (up < -limit ? -limit : (up > limit ? limit : up));
    const double sig = 1.0 / (1.0 + std::exp(-static_cast<double>(p.swiglu_alpha) * g));
    return (u + 1.0) * (g * sig);
  }
  return (gate / (1.0 + std::exp(-gate))) * up;
}

double nmse(const float* y, const double* ref, int64_t n) {
  if (n <= 0) return 0.0;
  if (y == nullptr || ref == nullptr) return std::numeric_limits<double>::infinity();
  double err = 0.0, norm = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    if (std::isnan(y[i]) || std::isnan(ref[i])) return std::numeric_limits<double>::infinity();
    const double d = static_cast<double>(y[i]) - ref[i];
    err += d * d;
    norm += ref[i] * ref[i];
  }
  if (!std::isfinite(err) || !std::isfinite(norm)) return std::numeric_limits<double>::infinity();
  if (norm == 0.0) return err == 0.0 ? 0.0 : std::numeric_limits<double>::infinity();
  return err / norm;
}

}  // namespace nvfp4moe
