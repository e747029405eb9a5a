// float64 references: the plainest loops that follow ops.hpp literally. They
// share only the codecs (format.hpp) and the activation with the engine.
#include <algorithm>
#include <cstdint>
#include <new>
#include <vector>

#include "nvfp4moe/format.hpp"
#include "nvfp4moe/ops.hpp"

namespace nvfp4moe {
namespace {

double activation_input(const void* x, DType dtype, int64_t index) {
  if (dtype == DType::kBF16) return bf16_to_float(static_cast<const uint16_t*>(x)[index]);
  return round_to_bf16(static_cast<const float*>(x)[index]);
}

// sum_k x[k] * W[e][row][k] in float64, x already BF16-rounded.
double dot_row(const ExpertWeightsView& w, int64_t expert, int64_t row, const std::vector<double>& x,
               std::vector<float>& w_row) {
  const int64_t r = expert * w.rows + row;
  dequantize_row(w.codes + r * w.row_code_bytes(), w.scales + r * w.row_scale_bytes(), w.cols, w_row.data());
  double sum = 0.0;
  for (int64_t k = 0; k < w.cols; ++k) sum += x[k] * static_cast<double>(w_row[k]);
  return sum;
}

}  // namespace

Status mul_mat_id_reference(const MulMatIdArgs& a, double* y) {
  MulMatIdArgs checked = a;
  checked.y = reinterpret_cast<float*>(y);  // only tested against null
  NVFP4MOE_RETURN_IF_ERROR(validate_mul_mat_id(checked));
  NVFP4MOE_RETURN_IF_ERROR(validate_weights(a.weights, "weights"));
  const ExpertWeightsView& w = a.weights;
  const int64_t K = w.cols, N = w.rows;
  try {
    std::vector<double> x(K);
    std::vector<float> w_row(K);
    for (int64_t t = 0; t < a.num_tokens; ++t) {
      for (int64_t j = 0; j < a.top_k; ++j) {
        const int64_t pair = t * a.top_k + j;
        const int64_t e = a.ids[pair];
        const int64_t x_row = a.x_per_slot ? pair : t;
        for (int64_t k = 0; k < K; ++k) x[k] = activation_input(a.x, a.x_dtype, x_row * K + k);
        for (int64_t n = 0; n < N; ++n) y[pair * N + n] = static_cast<double>(w.alpha_of(e)) * dot_row(w, e, n, x, w_row);
      }
    }
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, "mul_mat_id_reference: host allocation failed");
  }
  return ok_status();
}

Status moe_layer_reference(const MoeLayerArgs& a, double* out) {
  MoeLayerArgs checked = a;
  checked.out = reinterpret_cast<float*>(out);  // only tested against null
  NVFP4MOE_RETURN_IF_ERROR(validate_moe_layer(checked));
  const MoeLayerWeights& lw = a.weights;
  const bool merged = lw.merged();
  if (merged) {
    NVFP4MOE_RETURN_IF_ERROR(validate_weights(lw.gate_up, "gate_up"));
  } else {
    NVFP4MOE_RETURN_IF_ERROR(validate_weights(lw.gate, "gate"));
    NVFP4MOE_RETURN_IF_ERROR(validate_weights(lw.up, "up"));
  }
  NVFP4MOE_RETURN_IF_ERROR(validate_weights(lw.down, "down"));
  const int64_t H = lw.down.rows, F = lw.down.cols;
  const ExpertWeightsView& gate = merged ? lw.gate_up : lw.gate;
  const ExpertWeightsView& up = merged ? lw.gate_up : lw.up;
  const int64_t up_row0 = merged ? F : 0;
  try {
    std::vector<double> x(H), h(F);
    std::vector<float> w_row(std::max(H, F));
    for (int64_t t = 0; t < a.num_tokens; ++t) {
      for (int64_t n = 0; n < H; ++n) out[t * H + n] = 0.0;
      for (int64_t k = 0; k < H; ++k) x[k] = activation_input(a.x, a.x_dtype, t * H + k);
      for (int64_t j = 0; j < a.top_k; ++j) {
        const int64_t pair = t * a.top_k + j;
        const int64_t e = a.ids[pair];
        for (int64_t f = 0; f < F; ++f) {
          const double g = static_cast<double>(gate.alpha_of(e)) * dot_row(gate, e, f, x, w_row);
          const double u = static_cast<double>(up.alpha_of(e)) * dot_row(up, e, up_row0 + f, x, w_row);
          // The layer's documented BF16 rounding of h (via F32).
          h[f] = round_to_bf16(static_cast<float>(apply_activation_f64(a.act, g, u)));
        }
        const double route = a.route_weights ? static_cast<double>(a.route_weights[pair]) : 1.0;
        const double alpha_d = lw.down.alpha_of(e);
        // The layer's documented BF16 rounding of each slot's down row (via
        // F32), which the combine then weights.
        for (int64_t n = 0; n < H; ++n)
          out[t * H + n] += route * round_to_bf16(static_cast<float>(alpha_d * dot_row(lw.down, e, n, h, w_row)));
      }
    }
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, "moe_layer_reference: host allocation failed");
  }
  return ok_status();
}

}  // namespace nvfp4moe
