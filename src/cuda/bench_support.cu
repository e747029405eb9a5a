#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "cuda/bench_support.hpp"
#include "cuda/check.hpp"
#include "format/sm90_fragment.hpp"
#include "nvfp4moe/layout.hpp"

namespace nvfp4moe::cuda::bench_support {
namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__global__ void fill_packed_kernel(uint8_t* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n / 8; i += int64_t(gridDim.x) * blockDim.x) {
    uint64_t r = mix64(seed + uint64_t(i) * 0x9E3779B97F4A7C15ull);
    const int64_t in_chunk = (i * 8) % kSm90ChunkBytes;
    if (in_chunk >= kSm90ChunkCodeBytes) {  // scale codes of UE4M3 0x28 + (0 .. 0x20): 0.25 .. 4
      uint64_t s = 0;
      for (int b = 0; b < 8; ++b)
        s |= uint64_t(sm90::scale_code(uint8_t(0x28 + ((r >> (8 * b)) & 0xFF) % 0x21))) << (8 * b);
      r = s;
    }
    reinterpret_cast<uint64_t*>(p)[i] = r;
  }
}

// Element i of the random activations for a seed: uniform in [-1, 1] in
// steps of 1e-3, rounded to BF16.
__device__ __forceinline__ __nv_bfloat16 random_bf16_at(uint64_t seed, int64_t i) {
  const uint64_t r = mix64(seed + uint64_t(i) * 0x9E3779B97F4A7C15ull);
  return __float2bfloat16(float(int64_t(r % 2001) - 1000) * 1e-3f);
}

__global__ void fill_bf16_kernel(__nv_bfloat16* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = random_bf16_at(seed, i);
}

// The same values as fill_bf16_kernel for a seed, held as F32.
__global__ void fill_f32_kernel(float* p, int64_t n, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = __bfloat162float(random_bf16_at(seed, i));
}

__global__ void read_stream_kernel(const float4* p, int64_t n, float* sink) {
  float acc = 0.0f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float4 v = __ldcs(p + i);
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 1.2345f) sink[0] = acc;  // keeps the loads alive
}

const char* cublas_name(cublasStatus_t s) { return cublasGetStatusString(s); }

#define BENCH_CUBLAS_TRY(call)                                                                      \
  do {                                                                                              \
    const cublasStatus_t s_ = (call);                                                               \
    if (s_ != CUBLAS_STATUS_SUCCESS) return make_status(StatusCode::kDeviceError, #call ": ", cublas_name(s_)); \
  } while (0)

// The timed rounds of median_us_interleaved; the caller owns (and destroys)
// the events. The warm-up lasts at least `warmup` rounds and kMinWarmupMs of
// wall time, so that each case is timed at the clocks its own load settles
// to. NOTES: H200 (bench/results/2026-11-30-h200-7eace7b-bench-warmup.json):
// with 3 warm-up calls a light case timed right after a heavy one (the GPU
// at its ~690 W limit, SM clock 1170-1830 MHz) ran 1.1-1.35x slower than
// after 30 ms (mixtral down T=16 after down T=8192: 120 against 92 us; in
// the status run at 4d87be3 it made compact look slower than rect). 200 ms
// changes light cases by 0-3% more, and heavy ones (T=8192) by 3-15%: at
// 30 ms they are timed as bursts, not at sustained power.
constexpr double kMinWarmupMs = 30.0;
Status time_rounds(Stream stream, int warmup, int reps, int n, const std::function<Status(int, int)>& fn,
                   cudaEvent_t* a, cudaEvent_t* b, std::vector<std::vector<float>>* times) {
  NVFP4MOE_CUDA_TRY(cudaEventCreate(a));
  NVFP4MOE_CUDA_TRY(cudaEventCreate(b));
  const auto warm_start = std::chrono::steady_clock::now();
  const auto warm_ms = [&] {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - warm_start).count();
  };
  int warm = 0;
  for (; warm < warmup || warm_ms() < kMinWarmupMs; ++warm) {
    for (int j = 0; j < n; ++j) {  // one call in flight, as when timed
      NVFP4MOE_RETURN_IF_ERROR(fn(j, warm));
      NVFP4MOE_CUDA_TRY(cudaStreamSynchronize(stream));
    }
  }
  times->assign(size_t(n), {});
  for (int i = 0; i < reps; ++i) {
    for (int j = 0; j < n; ++j) {
      NVFP4MOE_CUDA_TRY(cudaEventRecord(*a, stream));
      NVFP4MOE_RETURN_IF_ERROR(fn(j, warm + i));
      NVFP4MOE_CUDA_TRY(cudaEventRecord(*b, stream));
      NVFP4MOE_CUDA_TRY(cudaEventSynchronize(*b));
      float ms = 0;
      NVFP4MOE_CUDA_TRY(cudaEventElapsedTime(&ms, *a, *b));
      (*times)[size_t(j)].push_back(ms * 1000.0f);
    }
  }
  return ok_status();
}

}  // namespace

Status median_us_interleaved(Stream stream, int warmup, int reps, int n, const std::function<Status(int, int)>& fn,
                             std::vector<double>* us, int groups) {
  if (reps < 1 || n < 1) return make_status(StatusCode::kInvalidArgument, "median_us: reps and n must be >= 1");
  cudaEvent_t a = nullptr, b = nullptr;
  std::vector<std::vector<float>> times;
  const Status st = time_rounds(stream, warmup, reps, n, fn, &a, &b, &times);
  if (a) cudaEventDestroy(a);
  if (b) cudaEventDestroy(b);
  NVFP4MOE_RETURN_IF_ERROR(st);
  us->clear();
  for (const std::vector<float>& t : times) us->push_back(mean_of_group_medians(t, groups));
  return ok_status();
}

Status median_us(Stream stream, int warmup, int reps, const std::function<Status(int)>& fn, double* us,
                 int groups) {
  std::vector<double> one;
  NVFP4MOE_RETURN_IF_ERROR(
      median_us_interleaved(stream, warmup, reps, 1, [&](int, int i) { return fn(i); }, &one, groups));
  *us = one[0];
  return ok_status();
}

Status enqueue_read_stream(const void* p, size_t bytes, float* sink, Stream stream) {
  int sms = 0;
  NVFP4MOE_CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int64_t n = int64_t(bytes / 16);
  const int64_t blocks = std::clamp<int64_t>((n + 511) / 512, 1, int64_t(sms) * 4);
  read_stream_kernel<<<unsigned(blocks), 512, 0, stream>>>(static_cast<const float4*>(p), n, sink);
  return cuda_status(cudaGetLastError(), "read_stream_kernel");
}

Status measure_read_bandwidth(size_t bytes, int reps, Stream stream, double* gbps) {
  DeviceBuffer buf, sink;
  NVFP4MOE_RETURN_IF_ERROR(DeviceBuffer::allocate(bytes, &buf));
  NVFP4MOE_RETURN_IF_ERROR(DeviceBuffer::allocate(64, &sink));
  NVFP4MOE_CUDA_TRY(cudaMemsetAsync(buf.get(), 0x3c, bytes, stream));
  double us = 0;
  NVFP4MOE_RETURN_IF_ERROR(median_us(stream, 2, reps, [&](int) {
    return enqueue_read_stream(buf.get(), bytes, sink.as<float>(), stream);
  }, &us));
  *gbps = double(bytes) / us * 1e-3;
  return ok_status();
}

Status fill_random_bf16(uint16_t* p, int64_t n, uint64_t seed, Stream stream) {
  fill_bf16_kernel<<<1024, 256, 0, stream>>>(reinterpret_cast<__nv_bfloat16*>(p), n, seed);
  return cuda_status(cudaGetLastError(), "fill_bf16_kernel");
}

Status fill_random_f32(float* p, int64_t n, uint64_t seed, Stream stream) {
  fill_f32_kernel<<<1024, 256, 0, stream>>>(p, n, seed);
  return cuda_status(cudaGetLastError(), "fill_f32_kernel");
}

Status measure_bf16_gemm(int n, int reps, Stream stream, double* tflops) {
  DeviceBuffer a, b, c;
  const size_t elems = size_t(n) * n;
  NVFP4MOE_RETURN_IF_ERROR(DeviceBuffer::allocate(elems * 2, &a));
  NVFP4MOE_RETURN_IF_ERROR(DeviceBuffer::allocate(elems * 2, &b));
  NVFP4MOE_RETURN_IF_ERROR(DeviceBuffer::allocate(elems * 2, &c));
  NVFP4MOE_RETURN_IF_ERROR(fill_random_bf16(a.as<uint16_t>(), int64_t(elems), 1, stream));
  NVFP4MOE_RETURN_IF_ERROR(fill_random_bf16(b.as<uint16_t>(), int64_t(elems), 2, stream));
  cublasHandle_t h;
  BENCH_CUBLAS_TRY(cublasCreate(&h));
  cublasSetStream(h, stream);
  const float one = 1.0f, zero = 0.0f;
  double us = 0;
  const Status st = median_us(stream, 3, reps, [&](int) {
    const cublasStatus_t s = cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, a.get(), CUDA_R_16BF, n,
                                          b.get(), CUDA_R_16BF, n, &zero, c.get(), CUDA_R_16BF, n,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return s == CUBLAS_STATUS_SUCCESS ? ok_status() : make_status(StatusCode::kDeviceError, "cublasGemmEx: ", cublas_name(s));
  }, &us);
  cublasDestroy(h);
  NVFP4MOE_RETURN_IF_ERROR(st);
  *tflops = 2.0 * n * double(n) * n / us * 1e-6;
  return ok_status();
}

Status random_device_weights(int64_t num_experts, int64_t rows, int64_t cols, uint64_t seed,
                             DeviceExpertWeights* out) {
  const int64_t bytes = sm90_packed_bytes(num_experts, rows, cols);
  if (bytes < 0) return invalid_argument("random_device_weights: bad shape ", rows, " x ", cols);
  DeviceExpertWeights w;
  w.num_experts = num_experts;
  w.rows = rows;
  w.cols = cols;
  NVFP4MOE_RETURN_IF_ERROR(DeviceBuffer::allocate(size_t(bytes), &w.packed));
  fill_packed_kernel<<<4096, 256>>>(w.packed.as<uint8_t>(), bytes, seed);
  NVFP4MOE_CUDA_CHECK_LAUNCH("fill_packed_kernel");
  std::vector<float> alpha(size_t(num_experts), 1.0f / 64);
  NVFP4MOE_RETURN_IF_ERROR(DeviceBuffer::allocate(alpha.size() * 4, &w.alpha));
  NVFP4MOE_CUDA_TRY(cudaMemcpy(w.alpha.get(), alpha.data(), alpha.size() * 4, cudaMemcpyHostToDevice));
  NVFP4MOE_RETURN_IF_ERROR(DeviceBuffer::allocate(alpha.size() * 4, &w.alpha_up));
  NVFP4MOE_CUDA_TRY(cudaMemcpy(w.alpha_up.get(), alpha.data(), alpha.size() * 4, cudaMemcpyHostToDevice));
  NVFP4MOE_CUDA_TRY(cudaDeviceSynchronize());
  *out = std::move(w);
  return ok_status();
}

struct CublasGroupedPeer::Impl {
  int64_t E = 0, N = 0, K = 0;
  DeviceBuffer w, x, y, ptrs;
  cublasHandle_t handle = nullptr;
};

Status CublasGroupedPeer::create(int64_t num_experts, int64_t rows, int64_t cols, uint64_t seed,
                                 std::unique_ptr<CublasGroupedPeer>* out) {
  std::unique_ptr<CublasGroupedPeer> p(new CublasGroupedPeer());
  p->impl_ = std::make_unique<Impl>();
  Impl& m = *p->impl_;
  m.E = num_experts;
  m.N = rows;
  m.K = cols;
  NVFP4MOE_RETURN_IF_ERROR(DeviceBuffer::allocate(size_t(num_experts * rows * cols) * 2, &m.w));
  NVFP4MOE_RETURN_IF_ERROR(fill_random_bf16(m.w.as<uint16_t>(), num_experts * rows * cols, seed, nullptr));
  BENCH_CUBLAS_TRY(cublasCreate(&m.handle));
  *out = std::move(p);
  return ok_status();
}

CublasGroupedPeer::~CublasGroupedPeer() {
  if (impl_ && impl_->handle) cublasDestroy(impl_->handle);
}

Status CublasGroupedPeer::time_us(const std::vector<int32_t>& counts, int reps, Stream stream, double* us) {
  Impl& m = *impl_;
  int64_t rows = 0;
  for (int32_t c : counts) rows += c;
  NVFP4MOE_RETURN_IF_ERROR(DeviceBuffer::allocate(size_t(std::max<int64_t>(rows, 1) * m.K) * 2, &m.x));
  NVFP4MOE_RETURN_IF_ERROR(DeviceBuffer::allocate(size_t(std::max<int64_t>(rows, 1) * m.N) * 2, &m.y));
  NVFP4MOE_RETURN_IF_ERROR(fill_random_bf16(m.x.as<uint16_t>(), rows * m.K, 7, stream));
  std::vector<cublasOperation_t> ta, tb;
  std::vector<int> mm, nn, kk, lda, ldb, ldc, sizes;
  std::vector<float> alpha, beta;
  std::vector<const void*> a_ptrs, b_ptrs;
  std::vector<void*> c_ptrs;
  int64_t off = 0;
  for (int64_t e = 0; e < m.E; ++e) {
    const int32_t c = counts[e];
    if (c == 0) continue;
    ta.push_back(CUBLAS_OP_T);
    tb.push_back(CUBLAS_OP_N);
    mm.push_back(int(m.N));
    nn.push_back(c);
    kk.push_back(int(m.K));
    lda.push_back(int(m.K));
    ldb.push_back(int(m.K));
    ldc.push_back(int(m.N));
    sizes.push_back(1);
    alpha.push_back(1.0f);
    beta.push_back(0.0f);
    a_ptrs.push_back(m.w.as<uint16_t>() + e * m.N * m.K);
    b_ptrs.push_back(m.x.as<uint16_t>() + off * m.K);
    c_ptrs.push_back(m.y.as<uint16_t>() + off * m.N);
    off += c;
  }
  const int groups = int(sizes.size());
  std::vector<const void*> all(a_ptrs);
  all.insert(all.end(), b_ptrs.begin(), b_ptrs.end());
  all.insert(all.end(), c_ptrs.begin(), c_ptrs.end());
  NVFP4MOE_RETURN_IF_ERROR(DeviceBuffer::allocate(all.size() * sizeof(void*), &m.ptrs));
  NVFP4MOE_CUDA_TRY(cudaMemcpy(m.ptrs.get(), all.data(), all.size() * sizeof(void*), cudaMemcpyHostToDevice));
  void** dp = m.ptrs.as<void*>();  // [A pointers | B pointers | C pointers]
  cublasSetStream(m.handle, stream);
  return median_us(stream, 3, reps, [&](int) {
    const cublasStatus_t s = cublasGemmGroupedBatchedEx(
        m.handle, ta.data(), tb.data(), mm.data(), nn.data(), kk.data(), alpha.data(), dp, CUDA_R_16BF, lda.data(),
        dp + groups, CUDA_R_16BF, ldb.data(), beta.data(), dp + 2 * groups, CUDA_R_16BF, ldc.data(), groups,
        sizes.data(), CUBLAS_COMPUTE_32F);
    return s == CUBLAS_STATUS_SUCCESS ? ok_status()
                                      : make_status(StatusCode::kDeviceError, "cublasGemmGroupedBatchedEx: ", cublas_name(s));
  }, us);
}

}  // namespace nvfp4moe::cuda::bench_support
