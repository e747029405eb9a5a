// PTX wrappers: programmatic dependent launch (sm_90+). A kernel launched
// with LaunchOrder::kOverlapPrevious (launch.hpp) may be scheduled while the
// kernel before it in the stream still runs; it must pass
// grid_dependency_wait() before it reads that kernel's output or writes
// what that kernel reads.
#pragma once

namespace nvfp4moe::cuda::ptx {

// Returns once the prerequisite grid has completed and its memory
// operations are visible; at once in a kernel launched without overlap.
__device__ __forceinline__ void grid_dependency_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// The next kernel, if launched with overlap, may be scheduled once every CTA
// of this grid has executed this or exited. It says nothing about this
// grid's memory: the next kernel still waits for that.
__device__ __forceinline__ void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

}  // namespace nvfp4moe::cuda::ptx
