// Helpers of the io tests: scratch directories, raw byte builders for
// hand-made (hostile) files, random NVFP4 experts.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "nvfp4moe/format.hpp"
#include "nvfp4moe/io.hpp"
#include "test_util.hpp"

namespace nvfp4moe::testing {

// A fresh directory, removed with everything in it when the object goes.
class ScratchDir {
 public:
  ScratchDir() {
    const char* base = std::getenv("TMPDIR");
    std::string tmpl = std::string(base && *base ? base : "/tmp") + "/nvfp4moe_io_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) ADD_FAILURE() << "mkdtemp failed for " << tmpl;
    path_ = buf.data();
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Names in the directory (to check that no temporary file was left).
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::string path_;
};

// Little-endian byte builder.
class Bytes {
 public:
  Bytes& u8(uint8_t v) { return raw(&v, 1); }
  Bytes& u16(uint16_t v) { return raw(&v, 2); }
  Bytes& u32(uint32_t v) { return raw(&v, 4); }
  Bytes& u64(uint64_t v) { return raw(&v, 8); }
  Bytes& i64(int64_t v) { return raw(&v, 8); }
  Bytes& f32(float v) { return raw(&v, 4); }
  Bytes& str(const std::string& s) { return raw(s.data(), s.size()); }
  Bytes& gguf_str(const std::string& s) { return u64(s.size()).str(s); }
  Bytes& zeros(size_t n) {
    b_.insert(b_.end(), n, 0);
    return *this;
  }
  Bytes& pad_to(size_t alignment) {
    while (b_.size() % alignment) b_.push_back(0);
    return *this;
  }
  Bytes& raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    b_.insert(b_.end(), c, c + n);
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return b_; }
  size_t size() const { return b_.size(); }

 private:
  std::vector<uint8_t> b_;
};

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  ASSERT_TRUE(io::write_file_atomic(path, b.data(), b.size()).ok()) << path;
}
inline void write_text(const std::string& path, const std::string& s) {
  ASSERT_TRUE(io::write_file_atomic(path, s.data(), s.size()).ok()) << path;
}

// Random experts quantized with two-level scaling (alpha != 1).
inline ExpertWeights random_experts(std::mt19937_64& rng, int64_t E, int64_t N, int64_t K, float stddev = 0.02f) {
  const std::vector<float> w = random_normal(rng, static_cast<size_t>(E * N * K), stddev);
  ExpertWeights out;
  QuantizeOptions opt;
  opt.global_scale = true;
  const Status s = quantize_experts(w.data(), E, N, K, opt, &out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

inline void expect_same_experts(const ExpertWeights& a, const ExpertWeights& b) {
  EXPECT_EQ(a.num_experts, b.num_experts);
  EXPECT_EQ(a.rows, b.rows);
  EXPECT_EQ(a.cols, b.cols);
  EXPECT_TRUE(a.codes == b.codes) << "codes differ";
  EXPECT_TRUE(a.scales == b.scales) << "scales differ";
  ASSERT_EQ(a.alpha.size(), b.alpha.size());
  for (size_t e = 0; e < a.alpha.size(); ++e) EXPECT_EQ(a.alpha[e], b.alpha[e]) << "alpha[" << e << "]";
}

}  // namespace nvfp4moe::testing
