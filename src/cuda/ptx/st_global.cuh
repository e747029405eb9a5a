// PTX wrapper: a 16-byte global store.
#pragma once

#include <cstdint>

namespace nvfp4moe::cuda::ptx {

// A 16-byte store if `store`, as one predicated instruction: behind a
// branch per store, ptxas sank the loads that feed the stores in between
// them (store_lane_rows, epilogue.cuh), and a uint4 copied out of a register
// array became four 4-byte stores. addr: 16-byte aligned.
__device__ __forceinline__ void st_global_v4_if(bool store, void* addr, uint4 v) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %5, 0;\n@p st.global.v4.u32 [%0], {%1, %2, %3, %4};\n}\n" ::"l"(addr),
      "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(int(store))
      : "memory");
}

}  // namespace nvfp4moe::cuda::ptx
