// The fused MoE layer on the CPU backend, shaped like qwen3-30b-a3b: E = 128,
// top-k = 8, H = 2048, F = 768 (merged gate_up [E][2F][H], down [E][H][F]),
// SwiGLU, router weights, uniform routing. FLOPs = 2 * T * k * 3 * F * H.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "cpu/kernels.hpp"
#include "cpu/ops_internal.hpp"
#include "cpu_bench_util.hpp"
#include "nvfp4moe/ops.hpp"

namespace nvfp4moe::bench {
namespace {

constexpr int64_t kExperts = 128, kTopK = 8, kHidden = 2048, kFfn = 768;

void MoeLayer(benchmark::State& state, const char* kernels_name) {
  const cpu::Kernels* kernels = std::string(kernels_name) == "avx2" ? cpu::avx2_kernels() : &cpu::best_kernels();
  if (kernels == nullptr) {
    state.SkipWithError("instruction set not available on this CPU");
    return;
  }
  static const ExpertWeights gate_up = random_weights(kExperts, 2 * kFfn, kHidden, 11);
  static const ExpertWeights down = random_weights(kExperts, kHidden, kFfn, 12);
  const int64_t T = state.range(0);
  const std::vector<int32_t> ids = uniform_ids(T, kTopK, kExperts, 3 + T);
  const std::vector<float> x = random_activations(T * kHidden, 8);
  std::vector<float> route(static_cast<size_t>(T * kTopK), 1.0f / kTopK);
  std::vector<float> out(static_cast<size_t>(T * kHidden));
  MoeLayerArgs a;
  a.weights.gate_up = gate_up.view();
  a.weights.down = down.view();
  a.x = x.data();
  a.ids = ids.data();
  a.route_weights = route.data();
  a.num_tokens = T;
  a.top_k = kTopK;
  a.out = out.data();
  for (auto _ : state) {
    const Status s = cpu::moe_layer_with(a, CpuOptions{}, *kernels);
    if (!s.ok()) state.SkipWithError(s.to_string().c_str());
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(6.0 * T * kTopK * kFfn * kHidden * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// The dev machine is shared: with --benchmark_repetitions=N, the "min"
// row is the run least disturbed by other processes.
double min_of(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }

BENCHMARK_CAPTURE(MoeLayer, best, "best")->Arg(1)->Arg(16)->Arg(128)->Arg(1024)->Unit(benchmark::kMicrosecond)->UseRealTime()->ComputeStatistics("min", min_of);
BENCHMARK_CAPTURE(MoeLayer, avx2, "avx2")->Arg(1)->Arg(16)->Arg(128)->Arg(1024)->Unit(benchmark::kMicrosecond)->UseRealTime()->ComputeStatistics("min", min_of);

}  // namespace
}  // namespace nvfp4moe::bench
