// Where a consumer or producer of an mbarrier ring is: the slot it uses next
// and the parity of that slot's current fill. Every ring in the CUDA backend
// (GEMM stages, the tile queue's item ring, the streamer's weight stages)
// steps through its slots with this one counter.
#pragma once

#include <cstdint>

namespace nvfp4moe::cuda {

struct PipelineState {
  int stage = 0;
  uint32_t phase = 0;

  template <int kStages>
  __device__ __forceinline__ void advance() {
    advance(kStages);
  }
  // Runtime ring depth: a compare instead of the division that it / stages
  // and it % stages would cost in a hot loop.
  __device__ __forceinline__ void advance(int num_stages) {
    if (++stage == num_stages) {
      stage = 0;
      phase ^= 1u;
    }
  }
};

}  // namespace nvfp4moe::cuda
