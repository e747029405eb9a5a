// Device-side pieces of `nvfp4moe bench --device cuda` that need CUDA
// kernels or cuBLAS: the two ceilings, random device inputs, and the cuBLAS
// BF16 grouped-GEMM peer. Not part of the public API.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "nvfp4moe/cuda.hpp"
#include "nvfp4moe/status.hpp"

namespace nvfp4moe::cuda::bench_support {

// The figure of one function's timed calls: the median; with groups > 1,
// call i belongs to group i % groups (the caller's rotation of routings and
// inputs) and the figure is the mean of the groups' medians. NOTES: with
// routings of different cost the calls' times are a mixture, and its
// overall median falls on either mode from run to run: gpt-oss down T = 16
// with Zipf routing hits 16-25 experts, so its routings need two or three
// rounds of narrow items on 132 SMs (48 or 64 us), and one status run read
// compact at 0.82x of rect on the same kernels (bench/results/2026-12-01-
// h200-0126f7f-prefill.json).
inline double mean_of_group_medians(std::vector<float> times, int groups) {
  groups = std::max(groups, 1);
  double sum = 0;
  int used = 0;
  for (int g = 0; g < groups; ++g) {
    std::vector<float> t;
    for (size_t i = size_t(g); i < times.size(); i += size_t(groups)) t.push_back(times[i]);
    if (t.empty()) continue;
    std::nth_element(t.begin(), t.begin() + t.size() / 2, t.end());
    sum += t[t.size() / 2];
    ++used;
  }
  return used ? sum / used : 0.0;
}

// Times fn(i) with device events around each call: warm-up calls, then
// mean_of_group_medians of reps calls. fn enqueues on `stream`.
Status median_us(Stream stream, int warmup, int reps, const std::function<Status(int)>& fn, double* us,
                 int groups = 1);
// The same for n functions timed in turns, fn(j, i) being call i of
// function j: warm-up rounds, then reps rounds of one call of each, so that
// every function meets the same clocks and power state (a comparison of two
// schedules or routings is not biased by which was timed first). (*us)[j]
// is function j's figure.
Status median_us_interleaved(Stream stream, int warmup, int reps, int n, const std::function<Status(int, int)>& fn,
                             std::vector<double>* us, int groups = 1);

// Read stream over `bytes` of device memory, GB/s (median of reps).
Status measure_read_bandwidth(size_t bytes, int reps, Stream stream, double* gbps);
// One launch of that read stream over `bytes` at p (16-byte aligned); sink:
// a device float it may write.
Status enqueue_read_stream(const void* p, size_t bytes, float* sink, Stream stream);
// cuBLAS BF16 GEMM n x n x n on random data (BF16 out, FP32 accumulate), TFLOP/s.
Status measure_bf16_gemm(int n, int reps, Stream stream, double* tflops);

// Random packed NVFP4 weights straight on the device: code bytes uniform,
// scale bytes in [0x28, 0x48], alpha = 1/64. `copies` independent copies.
Status random_device_weights(int64_t num_experts, int64_t rows, int64_t cols, uint64_t seed,
                             DeviceExpertWeights* out);
Status fill_random_bf16(uint16_t* p, int64_t n, uint64_t seed, Stream stream);
// fill_random_bf16's values for a seed, held as F32.
Status fill_random_f32(float* p, int64_t n, uint64_t seed, Stream stream);

// Times torch._grouped_mm's equivalent with cuBLAS: BF16 weights [E][N][K],
// rows already sorted by expert (GEMM only), per-expert row counts.
class CublasGroupedPeer {
 public:
  static Status create(int64_t num_experts, int64_t rows, int64_t cols, uint64_t seed,
                       std::unique_ptr<CublasGroupedPeer>* out);
  ~CublasGroupedPeer();
  Status time_us(const std::vector<int32_t>& counts, int reps, Stream stream, double* us);
  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace nvfp4moe::cuda::bench_support
