// The split-K reduction: partial sums added in split order (fixed, so the
// result is deterministic and the same under either schedule), then the same
// epilogue arithmetic as an unsplit tile: alpha, SwiGLU, router weight,
// output type and row scatter (epilogue.cuh).
#include "cuda/check.hpp"
#include "cuda/dequant.cuh"
#include "cuda/epilogue.cuh"
#include "cuda/launch.hpp"

namespace nvfp4moe::cuda {
namespace {

__global__ void reduce_split_k_kernel(const GemmParams p) {
  const bool swiglu = p.epilogue == EpilogueKind::kSwiGLU;
  const int64_t out_cols = swiglu ? p.n / 2 : p.n;
  const int32_t groups = int32_t(out_cols / 4);
  const int64_t split_stride = p.sorted_rows * p.n;
  const int32_t num_jobs = *p.num_jobs;
  // Every job over the whole grid, whose threads stride over its (row,
  // 4-column group) items: a few jobs of many rows (wide tiles) keep every
  // SM busy as well as many small ones do. NOTES: one CTA per job ran
  // mixtral's gate_up at T = 512 with two forced splits 9.3x slower than
  // unsplit, 13 CTAs reducing 235 MB.
  const int32_t first = int32_t(blockIdx.x * blockDim.x + threadIdx.x), stride = int32_t(gridDim.x * blockDim.x);
  for (int32_t j = 0; j < num_jobs; ++j) {
    const ExpertJob job = p.jobs[j];
    const float a = (p.alpha ? p.alpha[job.expert] : 1.0f) * kWeightDownscale;
    const float a_up = (p.alpha_up ? p.alpha_up[job.expert] : 1.0f) * kWeightDownscale;
    for (int32_t item = first; item < job.num_rows * groups; item += stride) {
      const int32_t r = job.row_begin + item / groups;
      const int64_t c = int64_t(item % groups) * 4;
      const int64_t gcol = swiglu ? gate_column(c) : c;
      const float* src = p.partial + int64_t(r) * p.n + gcol;
      float4 v = {0, 0, 0, 0}, u = {0, 0, 0, 0};
      for (int32_t s = 0; s < p.k_splits; ++s) {
        const float4 x = *reinterpret_cast<const float4*>(src + s * split_stride);
        v = {v.x + x.x, v.y + x.y, v.z + x.z, v.w + x.w};
        if (swiglu) {
          const float4 y = *reinterpret_cast<const float4*>(src + s * split_stride + 64);
          u = {u.x + y.x, u.y + y.y, u.z + y.z, u.w + y.w};
        }
      }
      v = {v.x * a, v.y * a, v.z * a, v.w * a};
      u = {u.x * a_up, u.y * a_up, u.z * a_up, u.w * a_up};
      const float rw = p.route_w ? p.route_w[p.sorted_src[r]] : 1.0f;
      store4(p, map_row(p.y_map, p.sorted_src, p.top_k, r), c, finish4(p, v, &u, rw));
    }
  }
}

}  // namespace

Status launch_reduce_split_k(const GemmParams& p, int num_sms, cudaStream_t stream) {
  reduce_split_k_kernel<<<num_sms * 4, 256, 0, stream>>>(p);
  NVFP4MOE_CUDA_CHECK_LAUNCH("reduce_split_k_kernel");
  return ok_status();
}

}  // namespace nvfp4moe::cuda
