// "Nothing lost" for the file readers (docs/reliability.md): a reader that
// fails leaves the object it was given as it was, so a caller can keep using
// the last good one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "io/io_test_util.hpp"
#include "nvfp4moe/io.hpp"

namespace nvfp4moe::io {
namespace {

TEST(ReliabilityIo, NpyToI32ThatDoesNotFitLeavesOutUntouched) {
  const std::vector<int64_t> values = {1, 2, int64_t{1} << 40, 4};
  NpyArray a;
  a.dtype = NpyDType::kI64;
  a.shape = {4};
  a.data.resize(values.size() * sizeof(int64_t));
  std::memcpy(a.data.data(), values.data(), a.data.size());
  std::vector<int32_t> out = {7, 7, 7};
  const Status s = a.to_i32(&out);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.to_string();
  EXPECT_THAT(s.message(), ::testing::HasSubstr("npy element 2 = 1099511627776"));
  EXPECT_EQ(out, (std::vector<int32_t>{7, 7, 7}));
}

TEST(ReliabilityIo, FailedParsesLeaveThePreviousResult) {
  const float values[4] = {1.0f, 2.0f, 3.0f, 4.0f};

  NpyArray npy;
  std::vector<uint8_t> good;
  ASSERT_TRUE(serialize_npy(NpyArray::from_f32({2, 2}, values), &good).ok());
  ASSERT_TRUE(parse_npy(good.data(), good.size(), "good.npy", &npy).ok());
  EXPECT_FALSE(parse_npy(good.data(), good.size() - 1, "cut.npy", &npy).ok());
  EXPECT_EQ(npy.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(npy.data.size(), 16u);

  GgufWriter gw;
  ASSERT_TRUE(gw.add_f32("t", {4}, values).ok());
  ASSERT_TRUE(gw.serialize(&good).ok());
  GgufFile gguf;
  ASSERT_TRUE(GgufFile::parse(good.data(), good.size(), "good.gguf", &gguf).ok());
  std::vector<uint8_t> bad = good;
  bad[0] = 'X';  // not the GGUF magic
  EXPECT_FALSE(GgufFile::parse(bad.data(), bad.size(), "cut.gguf", &gguf).ok());
  ASSERT_EQ(gguf.tensors().size(), 1u);
  std::vector<float> read;
  ASSERT_TRUE(gguf.read_f32(gguf.tensors()[0], &read).ok());
  EXPECT_EQ(read, std::vector<float>(values, values + 4));

  SafetensorsWriter sw;
  ASSERT_TRUE(sw.add_f32("t", {4}, values).ok());
  ASSERT_TRUE(sw.serialize(&good).ok());
  SafetensorsFile st;
  ASSERT_TRUE(SafetensorsFile::parse(good.data(), good.size(), "good.safetensors", &st).ok());
  bad = good;
  bad[8] = '[';  // the header is no longer a JSON object
  EXPECT_FALSE(SafetensorsFile::parse(bad.data(), bad.size(), "bad.safetensors", &st).ok());
  ASSERT_EQ(st.tensors().size(), 1u);
  EXPECT_EQ(st.tensors()[0].name, "t");
}

}  // namespace
}  // namespace nvfp4moe::io
