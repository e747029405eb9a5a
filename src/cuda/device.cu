// Device discovery. Never fails without a driver: no device is a count of 0.
#include <cuda_runtime.h>

#include "nvfp4moe/cuda.hpp"

namespace nvfp4moe::cuda {

bool built_with_cuda() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the sticky "no driver" error
    return 0;
  }
  return n;
}

Status device_info(int ordinal, DeviceInfo* out) {
  if (out == nullptr) return invalid_argument("device_info: out is null");
  const int n = device_count();
  if (ordinal < 0 || ordinal >= n)
    return make_status(StatusCode::kNoDevice, "device ", ordinal, " not found (", n, " CUDA devices)");
  cudaDeviceProp p{};
  cudaError_t e = cudaGetDeviceProperties(&p, ordinal);
  if (e != cudaSuccess)
    return make_status(StatusCode::kDeviceError, "cudaGetDeviceProperties(", ordinal, "): ", cudaGetErrorString(e));
  out->ordinal = ordinal;
  out->name = p.name;
  out->cc_major = p.major;
  out->cc_minor = p.minor;
  out->num_sms = p.multiProcessorCount;
  out->l2_bytes = p.l2CacheSize;
  out->global_mem_bytes = static_cast<int64_t>(p.totalGlobalMem);
  return ok_status();
}

}  // namespace nvfp4moe::cuda
