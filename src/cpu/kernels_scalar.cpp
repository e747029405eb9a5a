// The canonical chain of kernels.hpp in plain C++: the fallback for CPUs
// without AVX2 and the definition the vector kernels are tested against.
#include <cmath>
#include <cstdint>

#include "cpu/kernels.hpp"
#include "nvfp4moe/format.hpp"

namespace nvfp4moe::cpu {
namespace {

float lane_sum(const float* a) { return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7])); }

// One chunk of weights of one row, dequantized exactly into chunk order.
// Returns true on a rejected scale byte.
bool dequant_chunk(const uint8_t* codes, const uint8_t* scales, float* out) {
  bool bad = false;
  float scale[4];
  for (int b = 0; b < 4; ++b) {
    bad |= bad_scale_byte(scales[b]);
    scale[b] = ue4m3_to_float(scales[b]);
  }
  for (int i = 0; i < kChunk; ++i) {
    const int k = kChunkOrder[i];
    const uint8_t byte = codes[k / 2];
    out[i] = e2m1_to_float(k % 2 ? byte >> 4 : byte & 0xF) * scale[k / 16];
  }
  return bad;
}

bool dequant_panel(const WeightRows& w, int rows, int64_t k0, int64_t kp, float* tile, int64_t ld) {
  bool bad = false;
  for (int n = 0; n < rows; ++n) {
    const uint8_t* codes = w.codes + n * (w.cols / 2);
    const uint8_t* scales = w.scales + n * (w.cols / 16);
    for (int64_t k = k0; k < k0 + kp; k += kChunk) {
      bad |= dequant_chunk(codes + k / 2, scales + k / 16, tile + n * ld + (k - k0));
    }
  }
  return bad;
}

void gemm_panel(const float* const* x, int num_x, const float* tile, int64_t ld, int rows, int64_t kp,
                float* partial, bool first, bool last, float* sums, int64_t sums_stride) {
  for (int r = 0; r < num_x; ++r) {
    for (int n = 0; n < rows; ++n) {
      float* acc = partial + (static_cast<int64_t>(r) * rows + n) * kLanes;
      float a[kLanes] = {};
      if (!first) {
        for (int l = 0; l < kLanes; ++l) a[l] = acc[l];
      }
      const float* xr = x[r];
      const float* wr = tile + n * ld;
      for (int64_t i = 0; i < kp; i += kLanes) {
        for (int l = 0; l < kLanes; ++l) a[l] = std::fma(xr[i + l], wr[i + l], a[l]);
      }
      if (last) {
        sums[r * sums_stride + n] = lane_sum(a);
      } else {
        for (int l = 0; l < kLanes; ++l) acc[l] = a[l];
      }
    }
  }
}

bool gemv_direct(const WeightRows& w, int rows, const float* const* x, int num_x, float* sums, int64_t sums_stride,
                 float* scratch) {
  bool bad = false;
  float chunk[kChunk];
  for (int n = 0; n < rows; ++n) {
    const uint8_t* codes = w.codes + n * (w.cols / 2);
    const uint8_t* scales = w.scales + n * (w.cols / 16);
    float a[kMaxDirectRows][kLanes] = {};
    for (int64_t k = 0; k < w.cols; k += kChunk) {
      bad |= dequant_chunk(codes + k / 2, scales + k / 16, chunk);
      for (int r = 0; r < num_x; ++r) {
        for (int i = 0; i < kChunk; i += kLanes) {
          for (int l = 0; l < kLanes; ++l) a[r][l] = std::fma(x[r][k + i + l], chunk[i + l], a[r][l]);
        }
      }
    }
    for (int r = 0; r < num_x; ++r) sums[r * sums_stride + n] = lane_sum(a[r]);
  }
  (void)scratch;
  return bad;
}

}  // namespace

const Kernels& scalar_kernels() {
  static const Kernels kernels{"scalar", dequant_panel, gemm_panel, gemv_direct};
  return kernels;
}

}  // namespace nvfp4moe::cpu
