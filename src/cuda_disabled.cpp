// Built instead of src/cuda/ when the library is configured without CUDA.
#include "nvfp4moe/cuda.hpp"

namespace nvfp4moe::cuda {

bool built_with_cuda() { return false; }
int device_count() { return 0; }
Status device_info(int ordinal, DeviceInfo*) {
  return make_status(StatusCode::kNoDevice, "device ", ordinal, ": this build has no CUDA backend");
}

}  // namespace nvfp4moe::cuda
