// Writes a small seed corpus for each fuzz target: valid files from our own
// writers, so the fuzzers start past the magic numbers.
//   fuzz_make_seeds OUTDIR   ->  OUTDIR/{gguf,safetensors,npy,plan}/...
#include <sys/stat.h>

#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "nvfp4moe/io.hpp"

using namespace nvfp4moe;

namespace {

void check(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "fuzz_make_seeds: %s\n", s.to_string().c_str());
    std::exit(1);
  }
}

void save(const std::string& path, const std::vector<uint8_t>& bytes) {
  check(io::write_file_atomic(path, bytes.data(), bytes.size()));
}

ExpertWeights experts(std::mt19937& rng, int64_t E, int64_t N, int64_t K) {
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> w(static_cast<size_t>(E * N * K));
  for (float& x : w) x = d(rng);
  ExpertWeights out;
  check(quantize_experts(w.data(), E, N, K, QuantizeOptions{}, &out));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds OUTDIR\n");
    return 2;
  }
  const std::string out = argv[1];
  for (const char* sub : {"", "/gguf", "/safetensors", "/npy", "/plan"}) ::mkdir((out + sub).c_str(), 0755);
  std::mt19937 rng(1234);
  const ExpertWeights gate = experts(rng, 2, 64, 64), down = experts(rng, 2, 64, 64);

  {  // GGUF: a separate and a merged MoE layer, plus metadata of every type.
    io::GgufWriter w;
    w.set("general.architecture", io::GgufValue::make_string("qwen3moe"));
    w.set("qwen3moe.expert_count", io::GgufValue::make_uint(io::GgufType::kUint32, 2));
    w.set("qwen3moe.expert_used_count", io::GgufValue::make_uint(io::GgufType::kUint32, 1));
    w.set("qwen3moe.expert_weights_norm", io::GgufValue::make_bool(true));
    w.set("a.f", io::GgufValue::make_array(io::GgufType::kFloat32, {1, 2}));
    w.set("a.s", io::GgufValue::make_string_array({"x", "yz"}));
    w.set("a.n", io::GgufValue::make_array_of_arrays({io::GgufValue::make_int_array(io::GgufType::kInt16, {1})}));
    check(w.add_nvfp4_experts("blk.0.ffn_gate_exps", gate.view()));
    check(w.add_nvfp4_experts("blk.0.ffn_up_exps", gate.view()));
    check(w.add_nvfp4_experts("blk.0.ffn_down_exps", down.view()));
    std::vector<float> router(2 * 64, 0.5f);
    check(w.add_bf16("blk.0.ffn_gate_inp.weight", {64, 2}, router.data()));
    std::vector<uint8_t> bytes;
    check(w.serialize(&bytes));
    save(out + "/gguf/separate.gguf", bytes);

    io::GgufWriter m(64);
    ExpertWeights gu2 = experts(rng, 2, 128, 64);
    check(m.add_nvfp4_experts("blk.1.ffn_gate_up_exps", gu2.view()));
    check(m.add_nvfp4_experts("blk.1.ffn_down_exps", down.view()));
    const float scale = 0.5f;
    check(m.add_f32("blk.1.ffn_down_exps.input_scale", {1}, &scale));
    std::vector<float> dense(64 * 64, 0.25f);
    check(m.add_f16("blk.2.ffn_gate_exps.weight", {64, 64, 1}, dense.data()));
    check(m.serialize(&bytes));
    save(out + "/gguf/merged.gguf", bytes);
  }
  {  // safetensors: a ModelOpt layer and a dense Mixtral-style one.
    io::SafetensorsWriter w;
    w.set_metadata("format", "pt");
    check(w.add_modelopt_experts("model.layers.0.mlp.experts", "gate_proj", gate.view()));
    check(w.add_modelopt_experts("model.layers.0.mlp.experts", "up_proj", gate.view()));
    check(w.add_modelopt_experts("model.layers.0.mlp.experts", "down_proj", down.view()));
    const float s = 2.0f;
    check(w.add_f32("model.layers.0.mlp.experts.0.gate_proj.input_scale", {}, &s));
    std::vector<float> router(2 * 64, 0.5f);
    check(w.add_bf16("model.layers.0.mlp.gate.weight", {2, 64}, router.data()));
    std::vector<uint8_t> bytes;
    check(w.serialize(&bytes));
    save(out + "/safetensors/modelopt.safetensors", bytes);

    io::SafetensorsWriter d;
    std::vector<float> dense(64 * 64, 0.125f);
    for (const char* p : {"w1", "w2", "w3"}) {
      check(d.add_bf16(std::string("model.layers.3.block_sparse_moe.experts.0.") + p + ".weight", {64, 64},
                       dense.data()));
    }
    check(d.serialize(&bytes));
    save(out + "/safetensors/dense.safetensors", bytes);
    const std::string cfg = io::modelopt_nvfp4_quant_config_json();
    save(out + "/safetensors/hf_quant_config.json", std::vector<uint8_t>(cfg.begin(), cfg.end()));
  }
  {  // npy: a few dtypes and ranks.
    const float f[6] = {1, -2, 3, 0.5f, 0, 7};
    const int32_t i[4] = {0, 3, 1, 2};
    std::vector<uint8_t> bytes;
    check(io::serialize_npy(io::NpyArray::from_f32({2, 3}, f), &bytes));
    save(out + "/npy/f32.npy", bytes);
    check(io::serialize_npy(io::NpyArray::from_i32({4}, i), &bytes));
    save(out + "/npy/i32.npy", bytes);
    check(io::serialize_npy(io::NpyArray::from_f32({}, f), &bytes));
    save(out + "/npy/scalar.npy", bytes);
  }
  {  // plan: k, E (int16), block_rows selector, ids.
    std::vector<uint8_t> b = {2, 8, 0, 5};
    for (int32_t id : {0, 1, 2, 3, 7, 0, 5, 6, 1, 2}) {
      uint8_t le[4];
      std::memcpy(le, &id, 4);
      b.insert(b.end(), le, le + 4);
    }
    save(out + "/plan/small.bin", b);
  }
  return 0;
}
