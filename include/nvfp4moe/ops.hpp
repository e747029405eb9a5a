// The ops: MUL_MAT_ID (ggml semantics) and the fused MoE FFN layer, on the CPU
// backend, plus the float64 references the tests compare against.
//
// MUL_MAT_ID:  y[t][j][:] = alpha[e] * W[e] . x_row,  e = ids[t][j]
//   x is [T][K] (one row per token, broadcast to the k slots) or [T][k][K]
//   (one row per (token, slot)); y is [T][k][N] F32.
// MoE layer:   h = act(gate . x, up . x)           per (t, j), F features
//              out[t] = sum_j w[t][j] * alpha_down[e] * (W_down[e] . h)
//   summed in slot order j = 0, 1, ..., k-1, so the result is deterministic.
//
// Numerics (the exact path): activations are rounded to BF16, weights are
// dequantized exactly, products accumulate in FP32, alpha (and the router
// weight) multiply the FP32 accumulator in the writeback. The intermediate h
// is rounded to BF16 before the down projection, as on the GPU.
#pragma once

#include <cstdint>

#include "nvfp4moe/format.hpp"
#include "nvfp4moe/plan.hpp"
#include "nvfp4moe/status.hpp"

namespace nvfp4moe {

enum class DType : int32_t { kF32 = 0, kBF16 = 1 };
enum class Schedule : int32_t { kCompact = 0, kRect = 1 };

// "f32", "bf16"; "compact", "rect"; "unknown" for values outside the enums.
const char* dtype_name(DType t);
const char* schedule_name(Schedule s);

struct MulMatIdArgs {
  ExpertWeightsView weights;     // [E][N][K]
  const void* x = nullptr;       // [T][K] or [T][k][K]
  DType x_dtype = DType::kF32;
  bool x_per_slot = false;       // true: x is [T][k][K]
  const int32_t* ids = nullptr;  // [T][k]
  int64_t num_tokens = 0;        // T
  int64_t top_k = 0;             // k
  float* y = nullptr;            // [T][k][N]
};

enum class Activation : int32_t {
  kSwiGLU = 0,     // silu(g) * u
  kSwiGLUOai = 1,  // gpt-oss: g = min(g, limit); u = clamp(u, -limit, limit);
                   // (u + 1) * g * sigmoid(swiglu_alpha * g)
};
const char* activation_name(Activation a);  // "swiglu", "swiglu_oai"

struct ActivationParams {
  Activation kind = Activation::kSwiGLU;
  float swiglu_alpha = 1.702f;  // kSwiGLUOai only
  float limit = 7.0f;           // kSwiGLUOai only
};

// Fused MoE FFN layer weights. Either gate and up separately ([E][F][H] each),
// or merged gate_up ([E][2F][H], gate rows first, then up rows, as llama.cpp's
// ffn_gate_up_exps); down is [E][H][F]. Each projection has its own alpha.
struct MoeLayerWeights {
  ExpertWeightsView gate;     // unused when merged
  ExpertWeightsView up;       // unused when merged
  ExpertWeightsView gate_up;  // set rows = 2F to use the merged form
  ExpertWeightsView down;
  bool merged() const { return gate_up.codes != nullptr; }
};

struct MoeLayerArgs {
  MoeLayerWeights weights;
  ActivationParams act;
  const void* x = nullptr;  // [T][H]
  DType x_dtype = DType::kF32;
  const int32_t* ids = nullptr;            // [T][k]
  const float* route_weights = nullptr;    // [T][k]; nullptr means 1
  int64_t num_tokens = 0;
  int64_t top_k = 0;
  float* out = nullptr;  // [T][H]
};

// Validation shared by every backend: shapes, pointers, ids. Names the bad
// argument and its value. O(T * k): it reads ids but not the weights (their
// scales can be tens of MB, more than a decode-size op reads, and may live
// on a device). Checked: weight shapes (K % 64, sizes > 0, addressable) and
// non-null codes/scales; dtype, activation kind and parameters (kSwiGLUOai:
// finite swiglu_alpha, finite limit > 0); ids (validate_ids); x and y/out
// non-null when T > 0; alignment: x 2-byte (BF16) or 4-byte (F32), y, out,
// route_weights and every alpha 4-byte (ids: validate_ids). Layer: gate and
// up equal shapes (or gate_up with an even row count 2F), down [E][H][F]
// with H = gate/up cols = width of x and out, F = gate/up rows.
Status validate_mul_mat_id(const MulMatIdArgs& a);
Status validate_moe_layer(const MoeLayerArgs& a);

// CPU backend. num_threads <= 0 means hardware concurrency. Runs over the
// compact job list; alpha and the router weight are applied in the writeback.
// Besides validate_*, the CPU ops check every alpha (finite, >= 0) and every
// scale byte they decode (the routed experts' rows), and report a bad one
// with validate_weights' message (kFormatError naming its position).
// A failed call leaves the output (y, out) untouched or fully written:
//  - untouched: every argument error (kInvalidArgument, kOutOfRange), a bad
//    alpha (kFormatError naming .alpha[e]) and kOutOfMemory, all found
//    before anything is written;
//  - fully written: a bad scale byte (kFormatError naming .scales[e][n][b]),
//    found while the op runs; the op still finishes, and the values that
//    used the bad block are meaningless (the scalar kernels make them NaN
//    for 0x7F/0xFF, the vector kernels some finite value).
// NaN and Inf in x and route_weights are not errors: they propagate as IEEE
// arithmetic does through the formulas above (the gpt-oss clamps included),
// into that token's outputs only. Results are bit-identical for
// any thread count, schedule and instruction set (scalar, AVX2, AVX-512), and
// a token's result does not depend on the other tokens of the batch.
// Layer numerics in the writebacks: g = alpha_g * acc, u = alpha_u * acc (a
// merged gate_up has one alpha for both halves), h = bf16(act(g, u)),
// y[t][j] = (alpha_d * w[t][j]) * acc, out[t] = ((y[t][0] + y[t][1]) + ...).
struct CpuOptions {
  int num_threads = 0;
  Schedule schedule = Schedule::kCompact;
};
Status mul_mat_id_cpu(const MulMatIdArgs& a, const CpuOptions& opt = {});
Status moe_layer_cpu(const MoeLayerArgs& a, const CpuOptions& opt = {});

// float64 references (single-threaded, straightforward loops) on the same
// BF16-rounded activations. Output written as double. They run validate_*
// and validate_weights (a full scan) on every projection. The layer reference
// rounds h to BF16 (through F32, as the backends do) before the down
// projection, and each slot's down row to BF16 before its router weight, so
// only the accumulation order and precision differ.
Status mul_mat_id_reference(const MulMatIdArgs& a, double* y);
Status moe_layer_reference(const MoeLayerArgs& a, double* out);

// The activation, one element (shared by CPU, reference and tests).
float apply_activation(const ActivationParams& p, float gate, float up);
double apply_activation_f64(const ActivationParams& p, double gate, double up);

// NMSE = sum (y - ref)^2 / sum ref^2; NaN anywhere gives +inf (never passes).
// n <= 0 gives 0; an all-zero ref gives 0 if y is all zero too, else +inf.
double nmse(const float* y, const double* ref, int64_t n);

}  // namespace nvfp4moe
