// PTX wrappers: thread block clusters (sm_90). A kernel launched without a
// cluster runs as a cluster of one CTA, so these are valid in every launch.
#pragma once

#include <cstdint>

namespace nvfp4moe::cuda::ptx {

__device__ __forceinline__ uint32_t cluster_cta_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}

__device__ __forceinline__ uint32_t cluster_num_ctas() {
  uint32_t n;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n;
}

// Every non-exited thread of the cluster arrives, then waits for the others;
// shared-memory writes before it are visible to every CTA of the cluster
// after it (release / acquire).
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\n\tbarrier.cluster.wait.acquire;" ::: "memory");
}

// Reads the float at `local` (a shared-memory variable of this CTA) in the
// shared memory of cluster CTA `rank`: the same variable of that CTA.
__device__ __forceinline__ float ld_shared_cluster_f32(const float* local, uint32_t rank) {
  const uint32_t cta_addr = static_cast<uint32_t>(__cvta_generic_to_shared(local));
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(cta_addr), "r"(rank));
  float v;
  asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(remote) : "memory");
  return v;
}

}  // namespace nvfp4moe::cuda::ptx
