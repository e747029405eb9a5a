// GPU test helpers: device fixture (skips without a device), device buffers,
// random NVFP4 weights, and a float64 reference on sampled output rows.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "nvfp4moe/cuda.hpp"
#include "nvfp4moe/format.hpp"
#include "test_util.hpp"

#define ASSERT_OK(expr)                                 \
  do {                                                  \
    const ::nvfp4moe::Status s_ = (expr);               \
    ASSERT_TRUE(s_.ok()) << #expr << ": " << s_.to_string(); \
  } while (0)
#define ASSERT_CUDA(expr) ASSERT_EQ((expr), cudaSuccess) << #expr << ": " << cudaGetErrorString(cudaGetLastError())

namespace nvfp4moe::testing {

class GpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const Status s = cuda::check_device_supported(0);
    if (!s.ok()) GTEST_SKIP() << s.to_string();
    ASSERT_OK(cuda::Context::create(0, &ctx));
    ASSERT_CUDA(cudaStreamCreate(&stream));
  }
  void TearDown() override {
    if (stream) cudaStreamDestroy(stream);
  }
  std::unique_ptr<cuda::Context> ctx;
  cudaStream_t stream = nullptr;
};

template <typename T>
cuda::DeviceBuffer to_device(const std::vector<T>& v) {
  cuda::DeviceBuffer b;
  EXPECT_TRUE(cuda::DeviceBuffer::allocate(v.size() * sizeof(T), &b).ok());
  if (!v.empty()) EXPECT_EQ(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  return b;
}

template <typename T>
std::vector<T> to_host(const cuda::DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  if (n) EXPECT_EQ(cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return v;
}

// A stream capture of enqueue() in global mode (any host synchronization
// inside would invalidate it), instantiated; freed with the object.
class CapturedGraph {
 public:
  CapturedGraph() = default;
  CapturedGraph(const CapturedGraph&) = delete;
  CapturedGraph& operator=(const CapturedGraph&) = delete;
  ~CapturedGraph() {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }
  // enqueue()'s Status, or the capture's own error.
  Status capture(cudaStream_t stream, const std::function<Status()>& enqueue) {
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) != cudaSuccess)
      return make_status(StatusCode::kDeviceError, "cudaStreamBeginCapture: ", cudaGetErrorString(cudaGetLastError()));
    const Status enqueued = enqueue();
    const cudaError_t ended = cudaStreamEndCapture(stream, &graph_);
    if (!enqueued.ok()) return enqueued;
    if (ended != cudaSuccess) return make_status(StatusCode::kDeviceError, "cudaStreamEndCapture: ", cudaGetErrorString(ended));
    if (cudaGraphInstantiate(&exec_, graph_, 0) != cudaSuccess)
      return make_status(StatusCode::kDeviceError, "cudaGraphInstantiate: ", cudaGetErrorString(cudaGetLastError()));
    return ok_status();
  }
  cudaError_t launch(cudaStream_t stream) const { return cudaGraphLaunch(exec_, stream); }

 private:
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

// An experiments variable (NVFP4MOE_STREAM_SPLITS, NVFP4MOE_K_SPLITS,
// NVFP4MOE_BLOCK_ROWS: launch.hpp) set for one scope; a null value leaves
// the policy's choice. Unset on exit.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (value) setenv(name, value, 1);
  }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// A device buffer of n floats filled with NaN, so unwritten outputs show.
inline cuda::DeviceBuffer poisoned_floats(size_t n) {
  std::vector<float> nan(n, std::numeric_limits<float>::quiet_NaN());
  return to_device(nan);
}

// Outputs of one sequence of calls per way it can run: enqueue(outputs)
// enqueues the calls into their outputs.
using EnqueueInto = std::function<Status(std::vector<cuda::DeviceBuffer>*)>;
struct SerialDirectGraphed {
  std::vector<cuda::DeviceBuffer> serial, direct, graphed;
};

// The same `calls` calls run three ways, each into its own outputs of
// `floats` NaNs (allocated before, not during, the capture): launched one
// after another (NVFP4MOE_SERIAL_LAUNCHES), launched as the library overlaps
// them, and those overlapped launches captured in a graph and replayed. The
// device status is checked after the last two; the caller checks
// HasFatalFailure().
inline void run_serial_direct_graphed(cuda::Context& ctx, cudaStream_t stream, int calls, size_t floats,
                                      const EnqueueInto& enqueue, SerialDirectGraphed* out) {
  for (auto* ys : {&out->serial, &out->direct, &out->graphed})
    for (int r = 0; r < calls; ++r) ys->push_back(poisoned_floats(floats));
  {
    const ScopedEnv in_order("NVFP4MOE_SERIAL_LAUNCHES", "1");
    ASSERT_OK(enqueue(&out->serial));
  }
  ASSERT_OK(enqueue(&out->direct));
  ASSERT_OK(ctx.check_device_status(stream));
  CapturedGraph graph;
  ASSERT_OK(graph.capture(stream, [&] { return enqueue(&out->graphed); }));
  ASSERT_CUDA(graph.launch(stream));
  ASSERT_OK(ctx.check_device_status(stream));
}

// Overlap tests: every serial output is written (no NaN left), and the
// direct and graphed outputs equal it bit for bit.
inline void expect_overlap_equals_serial(const SerialDirectGraphed& out, size_t floats) {
  for (size_t r = 0; r < out.serial.size(); ++r) {
    const std::vector<float> want = to_host<float>(out.serial[r], floats);
    for (size_t i = 0; i < floats; ++i) ASSERT_FALSE(std::isnan(want[i])) << "call " << r << ": output " << i;
    EXPECT_EQ(0, std::memcmp(want.data(), to_host<float>(out.direct[r], floats).data(), floats * 4))
        << "call " << r << ": overlapped launches differ from serial ones";
    EXPECT_EQ(0, std::memcmp(want.data(), to_host<float>(out.graphed[r], floats).data(), floats * 4))
        << "call " << r << ": the graph's overlapped launches differ from serial ones";
  }
}

// Random NVFP4 weights: random codes, scale bytes around 1.0 (0x30..0x40:
// 2^-1 .. 2^1 with all mantissas), alpha positive.
inline ExpertWeights random_weights(std::mt19937_64& rng, int64_t E, int64_t N, int64_t K, float alpha_scale = 0.05f) {
  ExpertWeights w;
  w.num_experts = E;
  w.rows = N;
  w.cols = K;
  w.codes.resize(size_t(E * N * K / 2));
  w.scales.resize(size_t(E * N * K / 16));
  std::uniform_int_distribution<int> byte(0, 255), scale(0x30, 0x40);
  for (auto& c : w.codes) c = uint8_t(byte(rng));
  for (auto& s : w.scales) s = uint8_t(scale(rng));
  std::uniform_real_distribution<float> a(0.5f, 1.5f);
  w.alpha.resize(size_t(E));
  for (auto& x : w.alpha) x = alpha_scale * a(rng);
  return w;
}

// The common MUL_MAT_ID arguments: F32 x, F32 y, compact schedule.
inline cuda::CudaMulMatIdArgs mul_mat_id_args(const cuda::DeviceExpertWeights& w, const cuda::DeviceBuffer& x,
                                              const cuda::DeviceBuffer& ids, int64_t T, int64_t k,
                                              const cuda::DeviceBuffer& y) {
  cuda::CudaMulMatIdArgs a;
  a.weights = &w;
  a.x = x.get();
  a.ids = ids.as<int32_t>();
  a.num_tokens = T;
  a.top_k = k;
  a.y = y.get();
  return a;
}

// The common fused-layer arguments: F32 x, router weights, compact schedule.
inline cuda::CudaMoeLayerArgs moe_layer_args(const cuda::DeviceMoeLayer& layer, const cuda::DeviceBuffer& x,
                                             const cuda::DeviceBuffer& ids, const cuda::DeviceBuffer& route_w,
                                             int64_t T, int64_t k, const cuda::DeviceBuffer& out) {
  cuda::CudaMoeLayerArgs a;
  a.layer = &layer;
  a.x = x.get();
  a.ids = ids.as<int32_t>();
  a.route_weights = route_w.as<float>();
  a.num_tokens = T;
  a.top_k = k;
  a.out = out.as<float>();
  return a;
}

inline std::vector<float> bf16_rounded(std::vector<float> v) {
  for (auto& x : v) x = round_to_bf16(x);
  return v;
}

// float64 MUL_MAT_ID for the listed pairs only (pair = t*k + j): ref[i][n].
inline std::vector<double> reference_pairs(const ExpertWeights& w, const std::vector<float>& x_bf16, bool x_per_slot,
                                           const std::vector<int32_t>& ids, int64_t top_k,
                                           const std::vector<int64_t>& pairs) {
  const int64_t N = w.rows, K = w.cols;
  std::vector<double> ref(pairs.size() * N);
  std::vector<float> wrow(K);
  for (size_t i = 0; i < pairs.size(); ++i) {
    const int64_t pair = pairs[i], t = pair / top_k, e = ids[pair];
    const float* x = x_bf16.data() + (x_per_slot ? pair : t) * K;
    for (int64_t n = 0; n < N; ++n) {
      const int64_t row = e * N + n;
      dequantize_row(w.codes.data() + row * K / 2, w.scales.data() + row * K / 16, K, wrow.data());
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += double(wrow[k]) * double(x[k]);
      ref[i * N + n] = acc * w.alpha[e];
    }
  }
  return ref;
}

inline double nmse_rows(const std::vector<float>& y, int64_t N, const std::vector<int64_t>& pairs,
                        const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < pairs.size(); ++i)
    for (int64_t n = 0; n < N; ++n) {
      const double v = y[pairs[i] * N + n], r = ref[i * N + n];
      if (!std::isfinite(v)) return INFINITY;
      num += (v - r) * (v - r);
      den += r * r;
    }
  return den > 0 ? num / den : num;
}

// Where a failing output is wrong, for the failure message: each pair with
// outputs off by more than rel_tol of its row's RMS (up to 8 pairs), with the
// count and range of those outputs. A wrong activation word spoils a whole
// row; a wrong weight fragment spoils the same outputs in every pair.
inline std::string describe_wrong_rows(const std::vector<float>& y, int64_t N, const std::vector<int64_t>& pairs,
                                       const std::vector<double>& ref, double rel_tol) {
  std::string out;
  int listed = 0, wrong_pairs = 0;
  for (size_t i = 0; i < pairs.size(); ++i) {
    double ss = 0;
    for (int64_t n = 0; n < N; ++n) ss += ref[i * N + n] * ref[i * N + n];
    const double tol = rel_tol * std::sqrt(ss / double(N));
    int64_t bad = 0, first = -1, last = -1;
    for (int64_t n = 0; n < N; ++n)
      if (!(std::fabs(y[pairs[i] * N + n] - ref[i * N + n]) <= tol)) {
        ++bad;
        if (first < 0) first = n;
        last = n;
      }
    if (!bad) continue;
    ++wrong_pairs;
    if (listed++ < 8)
      out += " pair " + std::to_string(pairs[i]) + ": " + std::to_string(bad) + " outputs in [" +
             std::to_string(first) + ", " + std::to_string(last) + "];";
  }
  return std::to_string(wrong_pairs) + " of " + std::to_string(pairs.size()) + " pairs wrong:" + out;
}

}  // namespace nvfp4moe::testing
