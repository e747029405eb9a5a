// Fuzzes the .npy parser; whatever parses must survive our writer unchanged.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "nvfp4moe/io.hpp"

using namespace nvfp4moe;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  io::NpyArray a;
  if (!io::parse_npy(data, size, "fuzz.npy", &a).ok()) return 0;
  std::vector<float> f;
  (void)a.to_f32(&f);
  std::vector<int32_t> i;
  (void)a.to_i32(&i);
  std::vector<uint8_t> bytes;
  if (!io::serialize_npy(a, &bytes).ok()) std::abort();
  io::NpyArray b;
  if (!io::parse_npy(bytes.data(), bytes.size(), "again.npy", &b).ok()) std::abort();
  if (b.dtype != a.dtype || b.shape != a.shape || b.data != a.data) std::abort();
  return 0;
}
