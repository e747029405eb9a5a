// Experiment only: where the routing plan's time goes in a graph of 8 plans
// (the plan_in_graph_us figure). Linked against a build of the library; with
// one whose plan kernel writes %globaltimer at its phases (patched by
// 2026-12-01-plan-timeline.sh) it also dumps them. Prints, per graph of 8 calls (median of 30
// replays by device events, after 3 warm-ups):
//   - floors: an empty kernel of one 1024-thread CTA, of 32 such CTAs, and 32
//     CTAs launched cooperatively that meet at one grid barrier;
//   - the library's build_plan, E = 128, k = 8, T = 1 .. 8192, uniform routing;
// then the phases of every CTA of the last plan of one replay at T = 2048.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "nvfp4moe/cuda.hpp"

// Defined only by the patched library (weak: the probe also runs against
// an unpatched one, for plan times alone).
namespace nvfp4moe::cuda {
void plan_timeline_dump(const char* path) __attribute__((weak));
}

namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}
void check(const nvfp4moe::Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, s.message().c_str());
    std::exit(1);
  }
}

__global__ void __launch_bounds__(1024, 1) empty_kernel(int* sink) {
  if (sink && threadIdx.x == 1024) *sink = 1;
}

__device__ unsigned barrier_arrived, barrier_generation;
__global__ void __launch_bounds__(1024, 1) barrier_kernel(int* sink) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned gen = atomicAdd(&barrier_generation, 0);
    __threadfence();
    if (atomicAdd(&barrier_arrived, 1) == gridDim.x - 1) {
      barrier_arrived = 0;
      __threadfence();
      atomicAdd(&barrier_generation, 1);
    } else {
      while (*(volatile unsigned*)&barrier_generation == gen) {
      }
    }
  }
  __syncthreads();
  if (sink && threadIdx.x == 1024) *sink = 1;
}

// N adds in straight-line code over eight independent registers (ptxas
// folds pairs into one IADD3: 64, 256, 1024, 4096 adds are 1.1, 2.6, 8.6 and
// 33 KB of SASS in all), so one warp can issue one per cycle: how a kernel's
// time grows with the code it runs, cold (reps = 1) and once more warm
// (reps = 2, the same code again).
template <int N>
__global__ void __launch_bounds__(1024, 1) straight_line_kernel(int* sink, int step, int reps) {
  int v[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = threadIdx.x + j;
#pragma unroll 1
  for (int r = 0; r < reps; ++r) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("add.s32 %0, %0, %1;" : "+r"(v[i % 8]) : "r"(step));
  }
  int sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) sum ^= v[j];
  if (sum == -7) *sink = sum;
}

template <typename Enqueue>
float graph_us_per_call(cudaStream_t s, Enqueue enqueue) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  check(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "capture");
  for (int i = 0; i < 8; ++i) enqueue(i);
  check(cudaStreamEndCapture(s, &g), "end capture");
  check(cudaGraphInstantiate(&ge, g, 0), "instantiate");
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "event");
  check(cudaEventCreate(&b), "event");
  std::vector<float> ms;
  for (int r = 0; r < 33; ++r) {
    check(cudaEventRecord(a, s), "record");
    check(cudaGraphLaunch(ge, s), "graph launch");
    check(cudaEventRecord(b, s), "record");
    check(cudaEventSynchronize(b), "sync");
    float t = 0;
    check(cudaEventElapsedTime(&t, a, b), "elapsed");
    if (r >= 3) ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return ms[ms.size() / 2] * 1000.0f / 8;
}
}  // namespace

int main(int argc, char** argv) {
  const char* tl_path = argc > 1 ? argv[1] : "plan-timeline.csv";
  cudaStream_t s;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "stream");
  std::unique_ptr<nvfp4moe::cuda::Context> ctx;
  check(nvfp4moe::cuda::Context::create(0, &ctx), "context");

  std::printf("floor: empty 1 CTA x 1024: %.2f us per call\n",
              graph_us_per_call(s, [&](int) { empty_kernel<<<1, 1024, 0, s>>>(nullptr); }));
  std::printf("floor: empty 32 CTAs x 1024: %.2f us per call\n",
              graph_us_per_call(s, [&](int) { empty_kernel<<<32, 1024, 0, s>>>(nullptr); }));
  cudaLaunchAttribute coop = {};
  coop.id = cudaLaunchAttributeCooperative;
  coop.val.cooperative = 1;
  const auto coop_launch = [&](void (*k)(int*)) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(32);
    cfg.blockDim = dim3(1024);
    cfg.stream = s;
    cfg.attrs = &coop;
    cfg.numAttrs = 1;
    check(cudaLaunchKernelEx(&cfg, k, static_cast<int*>(nullptr)), "cooperative launch");
  };
  std::printf("floor: empty 32 CTAs x 1024 cooperative: %.2f us per call\n",
              graph_us_per_call(s, [&](int) { coop_launch(empty_kernel); }));
  std::printf("floor: grid barrier 32 CTAs x 1024 cooperative: %.2f us per call\n",
              graph_us_per_call(s, [&](int) { coop_launch(barrier_kernel); }));

  int* sink = nullptr;
  check(cudaMalloc(&sink, 4), "malloc sink");
  const auto code = [&](auto kernel, const char* name) {
    for (int threads : {32, 1024})
      for (int reps : {1, 2})
        std::printf("code: %s, 1 CTA x %d, %d pass%s: %.2f us per call\n", name, threads, reps, reps > 1 ? "es" : "",
                    graph_us_per_call(s, [&](int) { kernel<<<1, threads, 0, s>>>(sink, 1, reps); }));
  };
  code(straight_line_kernel<64>, "64 adds");
  code(straight_line_kernel<256>, "256 adds");
  code(straight_line_kernel<1024>, "1024 adds");
  code(straight_line_kernel<4096>, "4096 adds");
  check(cudaGetLastError(), "straight-line kernels");

  const int E = 128, k = 8;
  std::mt19937 rng(20261201);
  std::printf("seed 20261201\n");
  for (int T : {1, 16, 128, 512, 1024, 2048, 4096, 8192}) {
    std::vector<int32_t*> dids(8);
    for (auto& p : dids) {
      std::vector<int32_t> ids(size_t(T) * k);
      for (int t = 0; t < T; ++t) {
        std::vector<int32_t> e(E);
        for (int i = 0; i < E; ++i) e[i] = i;
        std::shuffle(e.begin(), e.end(), rng);
        std::copy(e.begin(), e.begin() + k, ids.begin() + size_t(t) * k);
      }
      check(cudaMalloc(&p, ids.size() * 4), "malloc ids");
      check(cudaMemcpy(p, ids.data(), ids.size() * 4, cudaMemcpyHostToDevice), "copy ids");
    }
    nvfp4moe::PlanOptions options = nvfp4moe::cuda::choose_plan_options(T, k, E);
    check(nvfp4moe::cuda::build_plan(*ctx, dids[0], T, k, E, options, s), "warm plan");
    check(cudaStreamSynchronize(s), "sync");
    const float us = graph_us_per_call(s, [&](int i) {
      check(nvfp4moe::cuda::build_plan(*ctx, dids[i], T, k, E, options, s), "plan");
    });
    std::printf("plan T=%d E=%d k=%d: %.2f us per call\n", T, E, k, us);
    if (T == 2048 && nvfp4moe::cuda::plan_timeline_dump) nvfp4moe::cuda::plan_timeline_dump(tl_path);
    for (auto p : dids) cudaFree(p);
  }
  check(ctx->check_device_status(s), "device status");
  return 0;
}
