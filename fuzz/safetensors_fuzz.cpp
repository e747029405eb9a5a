// Fuzzes the safetensors parser, the ModelOpt layer assembly and the config
// parser (the same bytes read as config.json text).
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "nvfp4moe/io.hpp"

using namespace nvfp4moe;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  io::CheckpointConfig cfg;
  (void)io::parse_checkpoint_config(std::string_view(reinterpret_cast<const char*>(data), size), "config.json",
                                    &cfg);
  io::SafetensorsFile f;
  if (!io::SafetensorsFile::parse(data, size, "fuzz.safetensors", &f).ok()) return 0;
  for (const auto& t : f.tensors()) {
    std::vector<float> values;
    (void)f.read_f32(t, &values);
  }
  const io::SafetensorsCheckpoint ckpt = io::SafetensorsCheckpoint::from_file(f);
  io::MoeLoadOptions opt;
  opt.quantize_dense = true;
  int loaded = 0;
  for (int64_t layer : io::list_moe_layers(ckpt)) {
    if (++loaded > 2) break;
    io::MoeLayerFile m;
    (void)io::load_moe_layer(ckpt, layer, &m, opt);
  }
  return 0;
}
