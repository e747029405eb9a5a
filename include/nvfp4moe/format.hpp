// NVFP4: the element and scale codecs, the canonical in-memory weight layout,
// the quantizer and the dequantizer.
//
// An NVFP4 weight is  w = e2m1(code) * ue4m3(scale[k / 16]) * alpha[expert].
//  - E2M1: 4 bits s.e1e0.m, values ±{0, 0.5, 1, 1.5, 2, 3, 4, 6}.
//  - UE4M3: one byte per 16 consecutive K elements, 4 exponent bits (bias 7)
//    and 3 mantissa bits. Bit 7 is ignored (as ggml does). 0x7F (and so
//    0xFF) is the NaN pattern: it decodes to a quiet NaN so that a corrupt
//    scale shows up in the output instead of silently becoming 0 (ggml maps
//    it to 0; our quantizer never writes it).
//  - alpha: one FP32 per expert (ModelOpt weight_scale_2, ggml's `.scale`),
//    applied to the FP32 accumulator in the matmul writeback.
// E2M1 * UE4M3 is exact in BF16 (at most 6 significant bits, exponent range
// 2^-10 .. 2688), which is why the exact path can run on BF16 tensor cores.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "nvfp4moe/status.hpp"

namespace nvfp4moe {

inline constexpr int kScaleBlock = 16;  // K elements per UE4M3 scale
inline constexpr int kKAlign = 64;      // K granularity of every layout (ggml block_nvfp4)
inline constexpr float kE2M1Max = 6.0f;
inline constexpr float kUE4M3Max = 448.0f;

// ---- element codecs -------------------------------------------------------
float e2m1_to_float(uint8_t code);  // uses the low 4 bits
// Round to nearest, ties to even code; |x| > 6 saturates to ±6; NaN -> +0.
// The sign bit follows x even when the magnitude rounds to 0: -0.0f and tiny
// negatives give 0x8 (-0), numerically zero.
uint8_t float_to_e2m1(float x);
float ue4m3_to_float(uint8_t byte);
// Round to nearest, ties to even; > 448 saturates to 448 (0x7E); x <= 0 and
// NaN give 0x00. Never returns 0x7F.
uint8_t float_to_ue4m3(float x);

// BF16 <-> F32 (round to nearest even; NaN stays NaN).
uint16_t float_to_bf16(float x);
float bf16_to_float(uint16_t x);
inline float round_to_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

// ---- canonical layout (= ModelOpt's byte layout) --------------------------
// codes  : uint8 [E][N][K/2], element 2i in the low nibble, 2i+1 in the high.
// scales : uint8 [E][N][K/16] UE4M3.
// alpha  : float [E]; nullptr means 1 for every expert.
// W[e] is N x K (N output features, K input features), as in ggml.
struct ExpertWeightsView {
  int64_t num_experts = 0;
  int64_t rows = 0;  // N
  int64_t cols = 0;  // K
  const uint8_t* codes = nullptr;
  const uint8_t* scales = nullptr;
  const float* alpha = nullptr;

  int64_t row_code_bytes() const { return cols / 2; }
  int64_t row_scale_bytes() const { return cols / kScaleBlock; }
  int64_t expert_code_bytes() const { return rows * row_code_bytes(); }
  int64_t expert_scale_bytes() const { return rows * row_scale_bytes(); }
  float alpha_of(int64_t e) const { return alpha ? alpha[e] : 1.0f; }
};

struct ExpertWeights {
  int64_t num_experts = 0, rows = 0, cols = 0;
  std::vector<uint8_t> codes;
  std::vector<uint8_t> scales;
  std::vector<float> alpha;  // size num_experts

  ExpertWeightsView view() const {
    return {num_experts, rows, cols, codes.data(), scales.data(), alpha.empty() ? nullptr : alpha.data()};
  }
};

// Checks shapes (K % 64 == 0, sizes > 0, E*N*K addressable), pointers
// (codes and scales non-null, alpha null or 4-byte aligned), and
// that every scale byte and alpha is finite and non-negative. Scale bytes
// 0x7F/0xFF (NaN) and 0x81..0xFE (sign bit set: negative in float8_e4m3fn,
// so a corrupt ModelOpt file) are reported as kFormatError with their
// position [expert][row][block]; 0x80 (-0) is accepted as zero. Bad alpha
// (NaN, inf, < 0) is kFormatError naming the expert; shapes and pointers are
// kInvalidArgument (kOutOfRange for sizes too large to address).
// This is what every op calls before touching the weights: it is one
// vectorized pass over the scales only (about 1 ms for the 25 MB of scales of
// 128 experts x 1536 x 2048 on one core), so calling it on every op is fine.
Status validate_weights(const ExpertWeightsView& w, const char* name);

struct QuantizeOptions {
  // ModelOpt two-level scaling: alpha[e] = amax_e / (6 * 448) and block
  // scales relative to it. Off: alpha = 1 and scale = amax_block / 6.
  bool global_scale = true;
};

// Quantizes F32 weights [E][N][K] (row-major). Each block's scale is chosen
// among the round-to-nearest amax/6 scale and its UE4M3 neighbours by least
// squared error, so the error is never above the plain amax/6 rule's.
// Elements are rounded to the nearest grid point (ties to the even code,
// decided exactly in double). alpha[e] = amax_e / 2688 rounded to F32 (1 for
// an all-zero expert). NaN/Inf input is kInvalidArgument naming
// w[e][n][k]; *out is only written on success. Large tensors are quantized
// on several threads; the result does not depend on the thread count.
Status quantize_experts(const float* w, int64_t num_experts, int64_t rows, int64_t cols,
                        const QuantizeOptions& opt, ExpertWeights* out);
Status quantize_experts_bf16(const uint16_t* w, int64_t num_experts, int64_t rows, int64_t cols,
                             const QuantizeOptions& opt, ExpertWeights* out);

// Exact dequantization of one row (codes K/2 bytes, scales K/16 bytes) to F32,
// without alpha.
void dequantize_row(const uint8_t* codes, const uint8_t* scales, int64_t cols, float* out);
// Whole tensor to F32 [E][N][K]; apply_alpha multiplies each expert by alpha.
Status dequantize_experts(const ExpertWeightsView& w, bool apply_alpha, float* out);

}  // namespace nvfp4moe
