// PTX wrappers: the special-function unit's approximate exp2 and reciprocal,
// denormals flushed (no range fix-ups around them, as __expf's non-ftz form
// adds).
#pragma once

namespace nvfp4moe::cuda::ptx {

__device__ __forceinline__ float ex2_approx_ftz(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ float rcp_approx_ftz(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

}  // namespace nvfp4moe::cuda::ptx
