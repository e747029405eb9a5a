// Real model files on the GPU: a llama.cpp-style GGUF and a ModelOpt
// safetensors checkpoint, written by our writers (the Python cross-checks
// prove those files are what llama.cpp / ModelOpt produce), loaded by the io
// library, uploaded, and run as a whole MoE layer against the float64
// reference on the same loaded weights.
#include <filesystem>
#include <fstream>

#include "gpu_test_util.hpp"
#include "nvfp4moe/io.hpp"
#include "nvfp4moe/ops.hpp"

namespace nvfp4moe::testing {
namespace {

constexpr double kNmseLayer = 1e-5;  // as GpuMoeLayer: BF16 intermediate

class GpuModelFile : public GpuTest {
 protected:
  std::filesystem::path dir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    auto d = std::filesystem::temp_directory_path() / (std::string("nvfp4moe_gpu_") + info->name());
    std::filesystem::remove_all(d);
    std::filesystem::create_directories(d);
    return d;
  }

  void run_layer(const io::MoeLayerFile& m, std::mt19937_64& rng) {
    const int64_t T = 23, k = 2, E = m.num_experts, H = m.hidden;
    const MoeLayerWeights w = m.weights();
    ActivationParams act;
    cuda::DeviceMoeLayer layer;
    ASSERT_OK(cuda::upload_moe_layer(w, act, &layer));
    std::vector<float> x = random_normal(rng, size_t(T * H), 1.0f);
    std::vector<int32_t> ids = random_ids(rng, T, k, E);
    std::vector<float> rw(size_t(T * k), 0.5f);
    cuda::DeviceBuffer dx = to_device(x), dids = to_device(ids), dw = to_device(rw);
    cuda::DeviceBuffer dout = poisoned_floats(size_t(T * H));
    cuda::CudaMoeLayerArgs a = moe_layer_args(layer, dx, dids, dw, T, k, dout);
    ASSERT_OK(cuda::moe_layer(*ctx, a, stream));
    ASSERT_OK(ctx->check_device_status(stream));
    const std::vector<float> out = to_host<float>(dout, size_t(T * H));

    MoeLayerArgs ra;
    ra.weights = w;
    ra.act = act;
    ra.x = x.data();
    ra.ids = ids.data();
    ra.route_weights = rw.data();
    ra.num_tokens = T;
    ra.top_k = k;
    std::vector<double> ref(size_t(T * H));
    ASSERT_OK(moe_layer_reference(ra, ref.data()));
    const double e = nmse(out.data(), ref.data(), int64_t(ref.size()));
    std::printf("[ nmse     ] %s layer from file: %.3g\n", m.format.c_str(), e);
    EXPECT_LE(e, kNmseLayer);
  }
};

TEST_F(GpuModelFile, GgufLayerRunsOnTheGpu) {
  std::mt19937_64 rng(test_seed());
  const int64_t E = 8, H = 256, F = 128;
  ExpertWeights gate = random_weights(rng, E, F, H, 0.02f), up = random_weights(rng, E, F, H, 0.03f),
                down = random_weights(rng, E, H, F, 0.02f);
  io::GgufWriter w;
  w.set("general.architecture", io::GgufValue::make_string("qwen3moe"));
  w.set("qwen3moe.expert_count", io::GgufValue::make_uint(io::GgufType::kUint32, uint64_t(E)));
  w.set("qwen3moe.expert_used_count", io::GgufValue::make_uint(io::GgufType::kUint32, 2));
  ASSERT_OK(w.add_nvfp4_experts("blk.0.ffn_gate_exps", gate.view()));
  ASSERT_OK(w.add_nvfp4_experts("blk.0.ffn_up_exps", up.view()));
  ASSERT_OK(w.add_nvfp4_experts("blk.0.ffn_down_exps", down.view()));
  const auto path = dir() / "m.gguf";
  ASSERT_OK(w.write(path.string()));
  io::MoeLayerFile m;
  ASSERT_OK(io::load_moe_layer(path.string(), 0, &m));
  ASSERT_EQ(m.gate.codes, gate.codes);
  ASSERT_EQ(m.down.scales, down.scales);
  ASSERT_EQ(m.up.alpha, up.alpha);
  run_layer(m, rng);
}

TEST_F(GpuModelFile, ModelOptSafetensorsLayerRunsOnTheGpu) {
  std::mt19937_64 rng(test_seed());
  const int64_t E = 4, H = 256, F = 192;
  ExpertWeights gate = random_weights(rng, E, F, H, 0.02f), up = random_weights(rng, E, F, H, 0.05f),
                down = random_weights(rng, E, H, F, 0.02f);
  io::SafetensorsWriter w;
  ASSERT_OK(w.add_modelopt_experts("model.layers.0.mlp.experts", "gate_proj", gate.view()));
  ASSERT_OK(w.add_modelopt_experts("model.layers.0.mlp.experts", "up_proj", up.view()));
  ASSERT_OK(w.add_modelopt_experts("model.layers.0.mlp.experts", "down_proj", down.view()));
  const auto d = dir();
  ASSERT_OK(w.write((d / "model.safetensors").string()));
  std::ofstream(d / "config.json") << R"({"num_experts": 4, "num_experts_per_tok": 2})";
  std::ofstream(d / "hf_quant_config.json") << R"({"quantization": {"quant_algo": "NVFP4", "group_size": 16}})";
  io::MoeLayerFile m;
  ASSERT_OK(io::load_moe_layer(d.string(), 0, &m));
  ASSERT_EQ(m.up.codes, up.codes);
  ASSERT_EQ(m.up.alpha, up.alpha);  // gate and up keep their own weight_scale_2
  ASSERT_EQ(m.gate.alpha, gate.alpha);
  run_layer(m, rng);
}

}  // namespace
}  // namespace nvfp4moe::testing
