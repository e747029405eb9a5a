// Fuzzes the GGUF parser, the tensor readers and the MoE layer assembly.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "nvfp4moe/io.hpp"

using namespace nvfp4moe;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  io::GgufFile f;
  if (!io::GgufFile::parse(data, size, "fuzz.gguf", &f).ok()) return 0;
  for (const auto& [key, value] : f.metadata()) (void)value.to_string();
  uint64_t u;
  (void)f.get_uint(f.architecture() + ".expert_count", &u);
  for (const auto& t : f.tensors()) {
    // Conversions are bounded by the file size; this only keeps runs fast.
    if (!t.size_known || t.nbytes > (1u << 20)) continue;
    std::vector<float> values;
    (void)f.read_f32(t, &values);
    ExpertWeights w;
    (void)f.read_nvfp4_experts(t, &w);
  }
  io::MoeLoadOptions opt;
  opt.quantize_dense = true;
  int loaded = 0;
  for (int64_t layer : io::list_moe_layers(f)) {
    if (++loaded > 2) break;
    io::MoeLayerFile m;
    if (io::load_moe_layer(f, layer, &m, opt).ok()) (void)m.weights();
  }
  return 0;
}
