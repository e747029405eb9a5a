// The CUDA backend (Hopper sm_90a). Host-side API; no CUDA headers needed to
// include it. Every call checks its arguments on the host, enqueues work on
// the given stream and never synchronizes the host in the forward path, so a
// whole layer can be captured in a CUDA graph.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "nvfp4moe/format.hpp"
#include "nvfp4moe/ops.hpp"
#include "nvfp4moe/plan.hpp"
#include "nvfp4moe/status.hpp"

namespace nvfp4moe::cuda {

struct DeviceInfo {
  int ordinal = -1;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  int num_sms = 0;
  int64_t l2_bytes = 0;
  int64_t global_mem_bytes = 0;
};

// True when the library was built with CUDA sources.
bool built_with_cuda();
// Number of usable devices (0 without a driver or device; never an error).
int device_count();
Status device_info(int ordinal, DeviceInfo* out);

}  // namespace nvfp4moe::cuda
