// Argument checks shared by the format code (validation, quantizer,
// dequantizer, layout conversions). Private to the library.
#pragma once

#include <cstdint>

#include "nvfp4moe/status.hpp"

namespace nvfp4moe::detail {

// num_experts, rows, cols > 0, cols % kKAlign == 0, and num_experts * rows *
// cols small enough that every byte offset of codes, scales and an F32 copy
// fits in int64_t and size_t. `name` prefixes the messages ("gate.cols = 100
// is not a multiple of 64").
Status check_weight_shape(int64_t num_experts, int64_t rows, int64_t cols, const char* name);

}  // namespace nvfp4moe::detail
