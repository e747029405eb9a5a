#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "io/io_test_util.hpp"
#include "nvfp4moe/io.hpp"

namespace nvfp4moe::io {
namespace {

using ::testing::HasSubstr;
using nvfp4moe::testing::random_experts;
using nvfp4moe::testing::ScratchDir;

std::vector<uint8_t> st_file(const std::string& header, size_t data_bytes) {
  nvfp4moe::testing::Bytes b;
  b.u64(header.size()).str(header).zeros(data_bytes);
  return b.bytes();
}

std::string parse_error(const std::vector<uint8_t>& b) {
  SafetensorsFile f;
  const Status s = SafetensorsFile::parse(b.data(), b.size(), "t.safetensors", &f);
  EXPECT_FALSE(s.ok()) << "a hostile file parsed";
  return s.message();
}

TEST(SafetensorsRoundTrip, DTypesShapesMetadata) {
  auto rng = std::mt19937_64(nvfp4moe::testing::test_seed());
  const std::vector<float> v = nvfp4moe::testing::random_normal(rng, 12, 1.0f);
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  ASSERT_TRUE(w.add_f32("b.f32", {3, 4}, v.data()).ok());
  ASSERT_TRUE(w.add_bf16("a.bf16", {12}, v.data()).ok());
  ASSERT_TRUE(w.add_tensor("c.u8", StDType::kU8, {2, 0}, {}).ok());
  ASSERT_TRUE(w.add_tensor("d.i64", StDType::kI64, {}, std::vector<uint8_t>(8, 0xFF)).ok());
  ASSERT_TRUE(w.add_tensor("e.fp8", StDType::kF8_E4M3, {1, 3}, {0x38, 0x7E, 0x01}).ok());
  EXPECT_FALSE(w.add_tensor("e.fp8", StDType::kU8, {1}, {0}).ok()) << "duplicate name";
  EXPECT_FALSE(w.add_tensor("f", StDType::kI32, {2}, {0, 0, 0}).ok()) << "wrong byte count";
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(w.serialize(&bytes).ok());
  EXPECT_EQ((8 + bytes[0] + (bytes[1] << 8)) % 8, 0) << "data section 8-byte aligned";

  SafetensorsFile f;
  const Status s = SafetensorsFile::parse(bytes.data(), bytes.size(), "x", &f);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(f.metadata().at("format"), "pt");
  ASSERT_EQ(f.tensors().size(), 5u);
  EXPECT_EQ(f.tensors()[0].name, "a.bf16");  // sorted by name
  const SafetensorsTensorInfo* t = f.find_tensor("b.f32");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{3, 4}));
  std::vector<float> got;
  ASSERT_TRUE(f.read_f32(*t, &got).ok());
  EXPECT_EQ(got, v);
  ASSERT_TRUE(f.read_f32(*f.find_tensor("a.bf16"), &got).ok());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(got[i], round_to_bf16(v[i]));
  EXPECT_EQ(f.find_tensor("c.u8")->num_elements(), 0);
  EXPECT_TRUE(f.find_tensor("d.i64")->shape.empty());
  const Status u = f.read_f32(*f.find_tensor("e.fp8"), &got);
  EXPECT_EQ(u.code(), StatusCode::kUnsupported);
  const uint8_t* p;
  uint64_t n;
  ASSERT_TRUE(f.tensor_bytes(*f.find_tensor("e.fp8"), &p, &n).ok());
  ASSERT_EQ(n, 3u);
  EXPECT_EQ(p[1], 0x7E);
  EXPECT_EQ(f.find_tensor("zzz"), nullptr);
}

TEST(SafetensorsHostile, TruncatedAtEveryByte) {
  SafetensorsWriter w;
  const float v[4] = {1, 2, 3, 4};
  ASSERT_TRUE(w.add_f32("x", {2, 2}, v).ok());
  ASSERT_TRUE(w.add_f32("y", {4}, v).ok());
  std::vector<uint8_t> full;
  ASSERT_TRUE(w.serialize(&full).ok());
  for (size_t len = 0; len < full.size(); ++len) {
    SafetensorsFile f;
    const Status s = SafetensorsFile::parse(full.data(), len, "t.safetensors", &f);
    ASSERT_FALSE(s.ok()) << "prefix of " << len << " bytes parsed";
    EXPECT_THAT(s.message(), HasSubstr("t.safetensors"));
  }
}

TEST(SafetensorsHostile, HeaderLengthAndJson) {
  nvfp4moe::testing::Bytes huge;
  huge.u64(1ULL << 40).str("{}");
  EXPECT_THAT(parse_error(huge.bytes()), HasSubstr("header length 1099511627776 exceeds"));
  nvfp4moe::testing::Bytes past;
  past.u64(100).str("{}");
  EXPECT_THAT(parse_error(past.bytes()), HasSubstr("runs past the end"));
  EXPECT_THAT(parse_error(st_file("[1]", 0)), HasSubstr("does not start with '{'"));
  EXPECT_THAT(parse_error(st_file("{\"a\": ", 0)), HasSubstr("invalid JSON"));
  EXPECT_THAT(parse_error(st_file("{\"a\": " + std::string(5000, '[') + std::string(5000, ']') + "}", 0)),
              HasSubstr("nests"));
  EXPECT_THAT(parse_error(st_file("{\"__metadata__\": {\"k\": 1}}", 0)), HasSubstr("not a string"));
}

TEST(SafetensorsHostile, TensorEntries) {
  EXPECT_THAT(parse_error(st_file(R"({"t": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 1]}})", 1)),
              HasSubstr("dtype 'Q9'"));
  EXPECT_THAT(parse_error(st_file(R"({"t": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 1]}})", 1)),
              HasSubstr("shape[0] = -1"));
  EXPECT_THAT(parse_error(st_file(R"({"t": {"dtype": "U8", "shape": [1.5], "data_offsets": [0, 1]}})", 1)),
              HasSubstr("shape[0] = 1.5"));
  EXPECT_THAT(parse_error(st_file(R"({"t": {"dtype": "U8", "shape": [2], "data_offsets": [0, 1]}})", 1)),
              HasSubstr("hold 1 bytes but U8 of this shape takes 2"));
  EXPECT_THAT(parse_error(st_file(R"({"t": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})", 3)),
              HasSubstr("end past the data section (3 bytes)"));
  EXPECT_THAT(parse_error(st_file(R"({"t": {"dtype": "U8", "shape": [0], "data_offsets": [2, 1]}})", 3)),
              HasSubstr("end before they begin"));
  EXPECT_THAT(parse_error(st_file(
                  R"({"t": {"dtype": "F64", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})", 8)),
              HasSubstr("overflows"));
  EXPECT_THAT(parse_error(st_file(R"({"t": {"dtype": "U8", "shape": [4]}})", 4)), HasSubstr("data_offsets"));
  EXPECT_THAT(parse_error(st_file(R"({"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]},
                                      "z": {"dtype": "U8", "shape": [0], "data_offsets": [1, 1]},
                                      "b": {"dtype": "U8", "shape": [2], "data_offsets": [2, 4]}})",
                                  4)),
              HasSubstr("overlap"));
  SafetensorsFile f;
  const auto ok = st_file(R"({"z": {"dtype": "U8", "shape": [0], "data_offsets": [1, 1]},
                              "a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}})",
                          4);
  EXPECT_TRUE(SafetensorsFile::parse(ok.data(), ok.size(), "t", &f).ok()) << "empty tensors may sit anywhere";
}

TEST(SafetensorsHostile, RandomByteFlipsNeverCrash) {
  auto rng = std::mt19937_64(nvfp4moe::testing::test_seed());
  const ExpertWeights e = random_experts(rng, 2, 2, 64);
  SafetensorsWriter w;
  ASSERT_TRUE(w.add_modelopt_experts("model.layers.0.mlp.experts", "gate_proj", e.view()).ok());
  ASSERT_TRUE(w.add_modelopt_experts("model.layers.0.mlp.experts", "up_proj", e.view()).ok());
  ASSERT_TRUE(w.add_modelopt_experts("model.layers.0.mlp.experts", "down_proj", e.view()).ok());
  std::vector<uint8_t> full;
  ASSERT_TRUE(w.serialize(&full).ok());
  std::uniform_int_distribution<size_t> pos(0, full.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int iter = 0; iter < 1000; ++iter) {
    std::vector<uint8_t> m = full;
    for (int k = 0; k < 2; ++k) m[pos(rng)] = static_cast<uint8_t>(byte(rng));
    SafetensorsFile f;
    if (!SafetensorsFile::parse(m.data(), m.size(), "t", &f).ok()) continue;
    MoeLayerFile layer;
    (void)load_moe_layer(SafetensorsCheckpoint::from_file(std::move(f)), 0, &layer);
  }
}

// ---- checkpoints and MoE layers ------------------------------------------------

struct ModelOptLayer {
  ExpertWeights gate, up, down;
  std::vector<float> router;
};

ModelOptLayer add_modelopt_layer(std::mt19937_64& rng, SafetensorsWriter* w, const std::string& prefix, int64_t layer,
                                 int64_t E, int64_t H, int64_t F) {
  ModelOptLayer l;
  l.gate = random_experts(rng, E, F, H);
  l.up = random_experts(rng, E, F, H, 0.05f);  // different alpha from gate
  l.down = random_experts(rng, E, H, F);
  const std::string experts = prefix + "layers." + std::to_string(layer) + ".mlp.experts";
  EXPECT_TRUE(w->add_modelopt_experts(experts, "gate_proj", l.gate.view()).ok());
  EXPECT_TRUE(w->add_modelopt_experts(experts, "up_proj", l.up.view()).ok());
  EXPECT_TRUE(w->add_modelopt_experts(experts, "down_proj", l.down.view()).ok());
  l.router = nvfp4moe::testing::random_normal(rng, static_cast<size_t>(E * H), 1.0f);
  EXPECT_TRUE(w->add_bf16(prefix + "layers." + std::to_string(layer) + ".mlp.gate.weight", {E, H}, l.router.data()).ok());
  for (float& r : l.router) r = round_to_bf16(r);
  return l;
}

TEST(SafetensorsMoeLayer, ModelOptSingleFileWithConfig) {
  auto rng = std::mt19937_64(nvfp4moe::testing::test_seed());
  ScratchDir dir;
  SafetensorsWriter w;
  const ModelOptLayer l = add_modelopt_layer(rng, &w, "model.", 2, 4, 128, 64);
  const float in_scale = 0.25f;
  for (int e = 0; e < 4; ++e) {
    ASSERT_TRUE(
        w.add_f32("model.layers.2.mlp.experts." + std::to_string(e) + ".down_proj.input_scale", {}, &in_scale).ok());
  }
  ASSERT_TRUE(w.write(dir.file("model.safetensors")).ok());
  nvfp4moe::testing::write_text(dir.file("config.json"),
                                R"({"num_experts": 4, "num_experts_per_tok": 2, "norm_topk_prob": true})");
  nvfp4moe::testing::write_text(dir.file("hf_quant_config.json"), modelopt_nvfp4_quant_config_json());

  MoeLayerFile m;
  const Status s = load_moe_layer(dir.path(), 2, &m);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(m.format, "safetensors");
  EXPECT_EQ(m.num_experts, 4);
  EXPECT_EQ(m.top_k, 2);
  EXPECT_TRUE(m.norm_topk);
  EXPECT_EQ(m.hidden, 128);
  EXPECT_EQ(m.ffn, 64);
  nvfp4moe::testing::expect_same_experts(m.gate, l.gate);
  nvfp4moe::testing::expect_same_experts(m.up, l.up);
  nvfp4moe::testing::expect_same_experts(m.down, l.down);
  EXPECT_NE(m.gate.alpha, m.up.alpha) << "gate and up keep their own weight_scale_2";
  EXPECT_EQ(m.router, l.router);
  EXPECT_EQ(m.down_input_scale, std::vector<float>(4, 0.25f));
  EXPECT_TRUE(m.gate_input_scale.empty());

  SafetensorsCheckpoint ck;
  ASSERT_TRUE(SafetensorsCheckpoint::open(dir.path(), &ck).ok());
  EXPECT_EQ(ck.config().quant_algo, "NVFP4");
  EXPECT_EQ(ck.config().group_size, 16);
  EXPECT_TRUE(ck.config().is_nvfp4());

  const Status none = load_moe_layer(dir.file("model.safetensors"), 3, &m);
  EXPECT_THAT(none.message(), HasSubstr("layers with experts: 2"));
}

TEST(SafetensorsMoeLayer, ShardedCheckpointAndPrefixes) {
  auto rng = std::mt19937_64(nvfp4moe::testing::test_seed());
  ScratchDir dir;
  SafetensorsWriter a, b;
  // Layer 0 entirely in shard a; layer 1's experts in a, its router in b; a
  // multimodal-style prefix in layer 1.
  const ModelOptLayer l0 = add_modelopt_layer(rng, &a, "model.", 0, 2, 64, 64);
  SafetensorsWriter tmp;
  const ModelOptLayer l1 = add_modelopt_layer(rng, &tmp, "model.language_model.", 1, 2, 64, 64);
  std::vector<uint8_t> tmp_bytes;
  ASSERT_TRUE(tmp.serialize(&tmp_bytes).ok());
  SafetensorsFile tf;
  ASSERT_TRUE(SafetensorsFile::parse(tmp_bytes.data(), tmp_bytes.size(), "tmp", &tf).ok());
  nlohmann::json weight_map;
  for (const auto& t : tf.tensors()) {
    const uint8_t* p;
    uint64_t n;
    ASSERT_TRUE(tf.tensor_bytes(t, &p, &n).ok());
    const bool router = t.name.find(".mlp.gate.weight") != std::string::npos;
    ASSERT_TRUE((router ? b : a).add_tensor(t.name, t.dtype, t.shape, std::vector<uint8_t>(p, p + n)).ok());
    weight_map[t.name] = router ? "model-00002-of-00002.safetensors" : "model-00001-of-00002.safetensors";
  }
  SafetensorsFile af;
  std::vector<uint8_t> a_bytes;
  ASSERT_TRUE(a.serialize(&a_bytes).ok());
  ASSERT_TRUE(SafetensorsFile::parse(a_bytes.data(), a_bytes.size(), "a", &af).ok());
  for (const auto& t : af.tensors()) weight_map[t.name] = "model-00001-of-00002.safetensors";
  ASSERT_TRUE(a.write(dir.file("model-00001-of-00002.safetensors")).ok());
  ASSERT_TRUE(b.write(dir.file("model-00002-of-00002.safetensors")).ok());
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}};
  nvfp4moe::testing::write_text(dir.file("model.safetensors.index.json"), index.dump());
  nvfp4moe::testing::write_text(
      dir.file("config.json"),
      R"({"text_config": {"num_local_experts": 2, "num_experts_per_tok": 1},
          "quantization_config": {"quant_method": "modelopt", "quant_algo": "nvfp4",
                                  "config_groups": {"g": {"weights": {"group_size": 16}}}}})");

  MoeLayerFile m;
  Status s = load_moe_layer(dir.file("model.safetensors.index.json"), 0, &m);
  ASSERT_TRUE(s.ok()) << s.to_string();
  nvfp4moe::testing::expect_same_experts(m.down, l0.down);
  EXPECT_EQ(m.top_k, 1);
  EXPECT_FALSE(m.norm_topk);
  s = load_moe_layer(dir.path(), 1, &m);
  ASSERT_TRUE(s.ok()) << s.to_string();
  nvfp4moe::testing::expect_same_experts(m.gate, l1.gate);
  EXPECT_EQ(m.router, l1.router) << "router from the other shard";
  std::vector<int64_t> layers;
  ASSERT_TRUE(list_moe_layers(dir.path(), &layers).ok());
  EXPECT_EQ(layers, (std::vector<int64_t>{0, 1}));
  MoeLoadOptions opt;
  opt.tensor_prefix = "model.";
  s = load_moe_layer(dir.path(), 1, &m, opt);
  EXPECT_THAT(s.message(), HasSubstr("no MoE expert tensors"));
}

TEST(SafetensorsMoeLayer, CheckpointErrorsAreNamed) {
  auto rng = std::mt19937_64(nvfp4moe::testing::test_seed());
  ScratchDir dir;
  nvfp4moe::testing::write_text(dir.file("model.safetensors.index.json"),
                                R"({"weight_map": {"x": "../../etc/passwd"}})");
  SafetensorsCheckpoint ck;
  Status s = SafetensorsCheckpoint::open(dir.path(), &ck);
  EXPECT_THAT(s.message(), HasSubstr("is not a file name in the index's directory"));

  nvfp4moe::testing::write_text(dir.file("model.safetensors.index.json"), R"({"weight_map": {"x": "a.safetensors"}})");
  SafetensorsWriter a;
  const float one = 1;
  ASSERT_TRUE(a.add_f32("y", {}, &one).ok());
  ASSERT_TRUE(a.write(dir.file("a.safetensors")).ok());
  s = SafetensorsCheckpoint::open(dir.path(), &ck);
  EXPECT_THAT(s.message(), HasSubstr("'x' is in 'a.safetensors', which does not hold it"));

  // A missing expert, a missing weight_scale_2, a group size of 32.
  SafetensorsWriter w;
  const ExpertWeights e = random_experts(rng, 3, 64, 64);
  ASSERT_TRUE(w.add_modelopt_experts("model.layers.0.mlp.experts", "gate_proj", e.view()).ok());
  ASSERT_TRUE(w.add_modelopt_experts("model.layers.0.mlp.experts", "up_proj", e.view()).ok());
  ExpertWeights two = e;
  two.num_experts = 2;
  ASSERT_TRUE(w.add_modelopt_experts("model.layers.0.mlp.experts", "down_proj", two.view()).ok());
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(w.serialize(&bytes).ok());
  SafetensorsFile f;
  ASSERT_TRUE(SafetensorsFile::parse(bytes.data(), bytes.size(), "m.safetensors", &f).ok());
  MoeLayerFile m;
  s = load_moe_layer(SafetensorsCheckpoint::from_file(f), 0, &m);
  EXPECT_THAT(s.message(), HasSubstr("down: expert 2 has no weight tensor"));

  CheckpointConfig cfg;
  EXPECT_TRUE(parse_checkpoint_config(R"({"quantization": {"quant_algo": "NVFP4", "group_size": 32}})", "q", &cfg).ok());
  EXPECT_EQ(cfg.group_size, 32);
  EXPECT_FALSE(cfg.is_nvfp4());
  EXPECT_FALSE(parse_checkpoint_config(R"({"num_experts_per_tok": -2})", "c", &cfg).ok());
  EXPECT_FALSE(parse_checkpoint_config(R"({"norm_topk_prob": "yes"})", "c", &cfg).ok());
  EXPECT_FALSE(parse_checkpoint_config("not json", "c", &cfg).ok());
}

TEST(SafetensorsMoeLayer, MixtralNamesAndDenseQuantize) {
  auto rng = std::mt19937_64(nvfp4moe::testing::test_seed());
  const int64_t E = 2, H = 64, F = 64;
  SafetensorsWriter w;
  std::vector<float> all[3];
  const char* names[3] = {"w1", "w3", "w2"};
  for (int p = 0; p < 3; ++p) {
    all[p] = nvfp4moe::testing::random_normal(rng, E * F * H, 0.1f);
    for (int64_t e = 0; e < E; ++e) {
      ASSERT_TRUE(w.add_f32("model.layers.0.block_sparse_moe.experts." + std::to_string(e) + "." + names[p] + ".weight",
                            {p == 2 ? H : F, p == 2 ? F : H}, all[p].data() + e * F * H)
                      .ok());
    }
  }
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(w.serialize(&bytes).ok());
  SafetensorsFile f;
  ASSERT_TRUE(SafetensorsFile::parse(bytes.data(), bytes.size(), "mixtral", &f).ok());
  const SafetensorsCheckpoint ck = SafetensorsCheckpoint::from_file(f);
  MoeLayerFile m;
  Status s = load_moe_layer(ck, 0, &m);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  MoeLoadOptions opt;
  opt.quantize_dense = true;
  s = load_moe_layer(ck, 0, &m, opt);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ExpertWeights want;
  ASSERT_TRUE(quantize_experts(all[1].data(), E, F, H, opt.quantize, &want).ok());
  nvfp4moe::testing::expect_same_experts(m.up, want);
  EXPECT_TRUE(m.norm_topk) << "Mixtral renormalises the top-k weights";
  EXPECT_TRUE(m.router.empty());
}

}  // namespace
}  // namespace nvfp4moe::io
