// The CUDA backend (Hopper sm_90a). Host-side API; including it needs no CUDA
// headers. Every op checks its arguments on the host, enqueues work on the
// given stream and never synchronizes the host, so a whole layer can be
// captured in a CUDA graph. Pointers in *Args structs are device pointers.
//
// Errors in device-resident routing ids (out of range, a repeated expert in
// one token) cannot be seen on the host without a sync. The plan kernel
// detects them, writes no job and records the first bad position in the
// context's status word; the op's output is then left untouched. Read it
// with Context::check_device_status() (synchronizes), e.g. in tests or after
// a step in a debug build.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "nvfp4moe/format.hpp"
#include "nvfp4moe/ops.hpp"
#include "nvfp4moe/plan.hpp"
#include "nvfp4moe/status.hpp"

struct CUstream_st;

namespace nvfp4moe::cuda {

using Stream = CUstream_st*;  // = cudaStream_t

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
// Whether this device can run the library's kernels (sm_90 today).
Status check_device_supported(int ordinal);

// Owned device allocation.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  static Status allocate(size_t bytes, DeviceBuffer* out);
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  template <typename T>
  T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// NVFP4 expert weights on the device, in the sm90 packed layout.
struct DeviceExpertWeights {
  int64_t num_experts = 0, rows = 0, cols = 0;  // E, N, K
  DeviceBuffer packed;
  DeviceBuffer alpha;     // [E] F32
  DeviceBuffer alpha_up;  // [E] F32, only for interleaved gate_up
  bool gate_up_interleaved = false;
};

// Validates (shape, NaN/negative scales, alpha), packs and uploads. Synchronous.
Status upload_expert_weights(const ExpertWeightsView& w, DeviceExpertWeights* out);

// A MoE FFN layer on the device: gate and up interleaved in 64-row blocks
// (layout.hpp, interleave_gate_up) with separate alphas, and down.
struct DeviceMoeLayer {
  DeviceExpertWeights gate_up;
  DeviceExpertWeights down;
  ActivationParams act;
  int64_t hidden = 0, ffn = 0, num_experts = 0;
};
Status upload_moe_layer(const MoeLayerWeights& w, const ActivationParams& act, DeviceMoeLayer* out);

// Per-stream working memory: the routing plan, intermediates and the tile
// queue of the compact schedule. Ops that share a Context must run one after
// another (one stream, or streams ordered by events); give each concurrent
// stream its own Context. reserve() sizes it; an op that needs more grows
// it, except while the stream is being captured, where it refuses with a
// message to reserve first.
class Context {
 public:
  static Status create(int device, std::unique_ptr<Context>* out);
  ~Context();
  Status reserve(int64_t num_tokens, int64_t top_k, int64_t num_experts, int64_t max_cols);
  int device() const;
  int num_sms() const;
  // Synchronizes the stream and reports a routing error the plan kernel saw.
  Status check_device_status(Stream stream);
  struct Impl;
  Impl* impl() { return impl_.get(); }

 private:
  Context();
  std::unique_ptr<Impl> impl_;
};

struct CudaMulMatIdArgs {
  const DeviceExpertWeights* weights = nullptr;
  const void* x = nullptr;  // [T][K] or [T][k][K], F32 or BF16
  DType x_dtype = DType::kF32;
  bool x_per_slot = false;
  const int32_t* ids = nullptr;  // [T][k]
  int64_t num_tokens = 0, top_k = 0;
  void* y = nullptr;  // [T][k][N]
  DType y_dtype = DType::kF32;
  Schedule schedule = Schedule::kCompact;
};
Status mul_mat_id(Context& ctx, const CudaMulMatIdArgs& a, Stream stream);

struct CudaMoeLayerArgs {
  const DeviceMoeLayer* layer = nullptr;
  const void* x = nullptr;  // [T][H]
  DType x_dtype = DType::kF32;
  const int32_t* ids = nullptr;          // [T][k]
  const float* route_weights = nullptr;  // [T][k]; nullptr = 1
  int64_t num_tokens = 0, top_k = 0;
  float* out = nullptr;  // [T][H]
  Schedule schedule = Schedule::kCompact;
  // Benchmark baseline: matmuls without folded scales, then separate
  // scale, SwiGLU, router-weight and combine passes (as llama.cpp does).
  bool unfused = false;
};
Status moe_layer(Context& ctx, const CudaMoeLayerArgs& a, Stream stream);

// Builds the routing plan on the device only (for tests and benchmarks).
Status build_plan(Context& ctx, const int32_t* ids, int64_t num_tokens, int64_t top_k, int64_t num_experts,
                  int32_t block_rows, Stream stream);
Status build_plan(Context& ctx, const int32_t* ids, int64_t num_tokens, int64_t top_k, int64_t num_experts,
                  const PlanOptions& options, Stream stream);
// Copies the last device plan back (synchronizes).
Status download_plan(Context& ctx, Stream stream, RoutingPlan* out);
// The token-tile height the ops use for T tokens (host policy, testable).
int32_t choose_block_rows(int64_t num_tokens, int64_t top_k, int64_t num_experts);
// The plan the ops build for T tokens (host policy, testable): either one
// token tile for every expert (choose_block_rows, light_max_rows = 0), or,
// for large batches over many experts, light experts of at most 32 rows
// run with narrow tiles and the others with wide ones (block_rows = 128,
// light_max_rows = 32); and where experts average at least 96 rows, broad
// experts (takes_broad_tiles, plan.hpp) run with 160-row tiles
// (broad_rows = 160).
PlanOptions choose_plan_options(int64_t num_tokens, int64_t top_k, int64_t num_experts);
// The plan a schedule builds: compact's is the above; rect, the baseline of
// a rectangular grid, plans the same token tile without expert classes.
PlanOptions choose_plan_options(Schedule schedule, int64_t num_tokens, int64_t top_k, int64_t num_experts);

}  // namespace nvfp4moe::cuda
