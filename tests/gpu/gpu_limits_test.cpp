// GPU limits: 2^22 tokens through MUL_MAT_ID (the plan walks 4M pairs in
// global memory: the ids no longer fit in shared memory), and device
// out-of-memory returned as a status, not an abort.
#include "gpu_test_util.hpp"

namespace nvfp4moe::testing {
namespace {

class GpuLimits : public GpuTest {};

TEST_F(GpuLimits, FourMillionTokens) {
  std::mt19937_64 rng(test_seed());
  const int64_t T = int64_t(1) << 22, k = 1, E = 8, N = 64, K = 64;
  ExpertWeights w = random_weights(rng, E, N, K);
  cuda::DeviceExpertWeights dw;
  ASSERT_OK(cuda::upload_expert_weights(w.view(), &dw));
  std::vector<int32_t> ids(static_cast<size_t>(T));
  for (auto& id : ids) id = int32_t(rng() % E);
  std::vector<float> x = random_normal(rng, size_t(T * K), 1.0f);
  cuda::DeviceBuffer dx = to_device(x), dids = to_device(ids), dy = poisoned_floats(size_t(T * N));
  ASSERT_OK(cuda::mul_mat_id(*ctx, mul_mat_id_args(dw, dx, dids, T, k, dy), stream));
  ASSERT_OK(ctx->check_device_status(stream));
  const std::vector<float> y = to_host<float>(dy, size_t(T * N));
  for (size_t i = 0; i < y.size(); ++i) ASSERT_FALSE(std::isnan(y[i])) << "y[" << i << "] not written";
  std::vector<int64_t> pairs;
  for (int i = 0; i < 64; ++i) pairs.push_back(int64_t(rng() % uint64_t(T)));
  pairs.push_back(T - 1);
  const std::vector<double> ref = reference_pairs(w, bf16_rounded(x), false, ids, k, pairs);
  EXPECT_LE(nmse_rows(y, N, pairs, ref), 1e-8);
}

TEST_F(GpuLimits, DeviceOutOfMemoryIsAStatus) {
  cuda::DeviceBuffer b;
  const Status s = cuda::DeviceBuffer::allocate(size_t(1) << 52, &b);  // 4 PiB
  EXPECT_EQ(s.code(), StatusCode::kOutOfMemory) << s.to_string();
  EXPECT_EQ(b.get(), nullptr);
  // The context is still usable afterwards.
  cuda::DeviceBuffer ok;
  EXPECT_TRUE(cuda::DeviceBuffer::allocate(1024, &ok).ok());
  const Status r = ctx->reserve(int64_t(1) << 30, 2, 8, int64_t(1) << 20);  // ~2^51 bytes of workspace
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.code() == StatusCode::kOutOfMemory || r.code() == StatusCode::kOutOfRange) << r.to_string();
}

}  // namespace
}  // namespace nvfp4moe::testing
