// Experiment only: the timing and error checks shared by the bandwidth
// probes beside this file. Median of 9 launches by device events, after one
// warm-up launch.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

inline void probe_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

template <typename Launch>
float probe_median_ms(Launch launch) {
  cudaEvent_t a, b;
  probe_check(cudaEventCreate(&a), "cudaEventCreate");
  probe_check(cudaEventCreate(&b), "cudaEventCreate");
  std::vector<float> ms;
  for (int r = 0; r < 10; ++r) {
    probe_check(cudaEventRecord(a), "cudaEventRecord");
    launch();
    probe_check(cudaGetLastError(), "probe kernel launch");
    probe_check(cudaEventRecord(b), "cudaEventRecord");
    probe_check(cudaEventSynchronize(b), "probe kernel");
    float t;
    cudaEventElapsedTime(&t, a, b);
    if (r > 0) ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}
