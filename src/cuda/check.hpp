// CUDA error handling: every runtime call goes through NVFP4MOE_CUDA_TRY,
// which turns a failure into a Status naming the call and the error.
#pragma once

#include <cuda_runtime.h>

#include "nvfp4moe/status.hpp"

namespace nvfp4moe::cuda {

inline Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return ok_status();
  const StatusCode code = e == cudaErrorMemoryAllocation ? StatusCode::kOutOfMemory : StatusCode::kDeviceError;
  return make_status(code, what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

}  // namespace nvfp4moe::cuda

#define NVFP4MOE_CUDA_TRY(call) NVFP4MOE_RETURN_IF_ERROR(::nvfp4moe::cuda::cuda_status((call), #call))
// After a kernel launch: launch-configuration errors surface here.
#define NVFP4MOE_CUDA_CHECK_LAUNCH(name) \
  NVFP4MOE_RETURN_IF_ERROR(::nvfp4moe::cuda::cuda_status(cudaGetLastError(), "launch " name))
