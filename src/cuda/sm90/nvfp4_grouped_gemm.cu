// Instances and launcher of the sm90 grouped GEMM. The one dispatch point
// from a runtime token-tile height to a compiled kernel.
#include "cuda/check.hpp"
#include "cuda/launch.hpp"
#include "cuda/sm90/nvfp4_grouped_gemm.cuh"

namespace nvfp4moe::cuda {
namespace {

template <int kBlockT>
Status launch_sm90(const GemmParams& p, int num_sms, cudaStream_t stream) {
  auto kernel = sm90::nvfp4_grouped_gemm_kernel<kBlockT>;
  constexpr size_t smem = sm90::smem_bytes<kBlockT>();
  NVFP4MOE_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  int64_t grid = num_sms;  // compact: persistent, one CTA per SM
  if (p.schedule == Schedule::kRect) grid = int64_t(p.num_experts) * p.rect_tiles_per_expert * p.n_tiles();
  if (grid <= 0) return ok_status();
  if (grid > INT32_MAX)
    return make_status(StatusCode::kOutOfRange, "rect schedule grid of ", grid, " CTAs exceeds the launch limit");
  kernel<<<dim3(uint32_t(grid)), dim3(sm90::kThreads), smem, stream>>>(p);
  NVFP4MOE_CUDA_CHECK_LAUNCH("nvfp4_grouped_gemm_kernel");
  return ok_status();
}

}  // namespace

Status launch_grouped_gemm(const GemmParams& p, int32_t block_t, int num_sms, cudaStream_t stream) {
  switch (block_t) {
    case 32: return launch_sm90<32>(p, num_sms, stream);
    case 128: return launch_sm90<128>(p, num_sms, stream);
    default: return make_status(StatusCode::kInternal, "no grouped GEMM instance for a token tile of ", block_t);
  }
}

}  // namespace nvfp4moe::cuda
