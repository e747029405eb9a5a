// PTX wrappers: named barriers, proxy fences, register reallocation.
#pragma once

#include <cstdint>

namespace nvfp4moe::cuda::ptx {

__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// NOTES: generic-proxy shared-memory writes that the async proxy (wgmma,
// bulk copies) reads next need this fence in each writing thread. The other
// way round too: a bulk copy that refills a ring slot which consumers read
// with ld.shared needs it in the issuing thread, after its wait for their
// release and before the copy; without it the copy may land before their
// loads have read the slot.
__device__ __forceinline__ void fence_proxy_async_shared() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}

template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t selector) {
  uint32_t d;
  asm("prmt.b32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(selector));
  return d;
}

// a * {b.lo, b.lo} and a * {b.hi, b.hi} (mul.rn.bf16x2). NOTES: ptxas folds the {h, h}
// move into the multiply's operand swizzle (HMUL2 ..., R.H0_H0 / .H1_H1),
// so broadcasting a half costs no instruction; a prmt that builds the same
// register does not fold.
__device__ __forceinline__ uint32_t mul_bf16x2_by_lo(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("{.reg .b16 l, h; .reg .b32 f; mov.b32 {l, h}, %2; mov.b32 f, {l, l}; mul.rn.bf16x2 %0, %1, f;}"
      : "=r"(d) : "r"(a), "r"(b));
  return d;
}
__device__ __forceinline__ uint32_t mul_bf16x2_by_hi(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("{.reg .b16 l, h; .reg .b32 f; mov.b32 {l, h}, %2; mov.b32 f, {h, h}; mul.rn.bf16x2 %0, %1, f;}"
      : "=r"(d) : "r"(a), "r"(b));
  return d;
}

}  // namespace nvfp4moe::cuda::ptx
