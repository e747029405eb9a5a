// MUL_MAT_ID on the CPU backend, shaped like qwen3-30b-a3b's gate_up
// projection: E = 128 experts, top-k = 8, N = 1536 (2 x 768), K = 2048, x
// shared by the k slots of a token, uniform routing.
// FLOPs = 2 * T * k * N * K (reported as GFLOP/s).
//
//   MulMatId/<kernels>/T        ids fixed across iterations: for small T the
//                               touched experts stay in the 32 MB L3
//   MulMatIdColdDecode/...      T = 1 with ids cycling over 64 routings, so
//                               most weights stream from DRAM
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/kernels.hpp"
#include "cpu/ops_internal.hpp"
#include "cpu_bench_util.hpp"
#include "nvfp4moe/ops.hpp"

namespace nvfp4moe::bench {
namespace {

constexpr int64_t kExperts = 128, kTopK = 8, kRows = 1536, kCols = 2048;

const ExpertWeights& qwen_gate_up() {
  static const ExpertWeights w = random_weights(kExperts, kRows, kCols, 1234);
  return w;
}

const cpu::Kernels* kernels_by_name(const char* name) {
  const std::string s = name;
  if (s == "avx512") return cpu::avx512_kernels();
  if (s == "avx2") return cpu::avx2_kernels();
  if (s == "scalar") return &cpu::scalar_kernels();
  return &cpu::best_kernels();
}

void set_flops(benchmark::State& state, int64_t T) {
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * T * kTopK * kRows * kCols * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

void MulMatId(benchmark::State& state, const char* kernels_name) {
  const cpu::Kernels* kernels = kernels_by_name(kernels_name);
  if (kernels == nullptr) {
    state.SkipWithError("instruction set not available on this CPU");
    return;
  }
  const int64_t T = state.range(0);
  const ExpertWeights& w = qwen_gate_up();
  const std::vector<int32_t> ids = uniform_ids(T, kTopK, kExperts, 99 + T);
  const std::vector<float> x = random_activations(T * kCols, 7);
  std::vector<float> y(static_cast<size_t>(T * kTopK * kRows));
  MulMatIdArgs a;
  a.weights = w.view();
  a.x = x.data();
  a.ids = ids.data();
  a.num_tokens = T;
  a.top_k = kTopK;
  a.y = y.data();
  for (auto _ : state) {
    const Status s = cpu::mul_mat_id_with(a, CpuOptions{}, *kernels);
    if (!s.ok()) state.SkipWithError(s.to_string().c_str());
    benchmark::DoNotOptimize(y.data());
  }
  set_flops(state, T);
}

void MulMatIdColdDecode(benchmark::State& state, const char* kernels_name) {
  const cpu::Kernels* kernels = kernels_by_name(kernels_name);
  if (kernels == nullptr) {
    state.SkipWithError("instruction set not available on this CPU");
    return;
  }
  constexpr int kRoutings = 64;
  const ExpertWeights& w = qwen_gate_up();
  const std::vector<int32_t> ids = uniform_ids(kRoutings, kTopK, kExperts, 5);
  const std::vector<float> x = random_activations(kCols, 7);
  std::vector<float> y(static_cast<size_t>(kTopK * kRows));
  MulMatIdArgs a;
  a.weights = w.view();
  a.x = x.data();
  a.num_tokens = 1;
  a.top_k = kTopK;
  a.y = y.data();
  int i = 0;
  for (auto _ : state) {
    a.ids = ids.data() + (i++ % kRoutings) * kTopK;
    const Status s = cpu::mul_mat_id_with(a, CpuOptions{}, *kernels);
    if (!s.ok()) state.SkipWithError(s.to_string().c_str());
    benchmark::DoNotOptimize(y.data());
  }
  set_flops(state, 1);
}

// The dev machine is shared: with --benchmark_repetitions=N, the "min"
// row is the run least disturbed by other processes.
double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

BENCHMARK_CAPTURE(MulMatId, best, "best")->Arg(1)->Arg(16)->Arg(128)->Arg(2048)->Unit(benchmark::kMicrosecond)->UseRealTime()->ComputeStatistics("min", min_of);
BENCHMARK_CAPTURE(MulMatId, avx2, "avx2")->Arg(1)->Arg(16)->Arg(128)->Arg(2048)->Unit(benchmark::kMicrosecond)->UseRealTime()->ComputeStatistics("min", min_of);
BENCHMARK_CAPTURE(MulMatId, scalar, "scalar")->Arg(1)->Arg(16)->Unit(benchmark::kMicrosecond)->UseRealTime()->ComputeStatistics("min", min_of);
BENCHMARK_CAPTURE(MulMatIdColdDecode, best, "best")->Unit(benchmark::kMicrosecond)->UseRealTime()->ComputeStatistics("min", min_of);
BENCHMARK_CAPTURE(MulMatIdColdDecode, avx2, "avx2")->Unit(benchmark::kMicrosecond)->UseRealTime()->ComputeStatistics("min", min_of);

}  // namespace
}  // namespace nvfp4moe::bench
