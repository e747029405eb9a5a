#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "io/io_test_util.hpp"
#include "nvfp4moe/io.hpp"

namespace nvfp4moe::io {
namespace {

using ::testing::HasSubstr;
using nvfp4moe::testing::ScratchDir;

// A .npy file with a hand-written header (version major.0).
std::vector<uint8_t> npy_bytes(const std::string& dict, const std::vector<uint8_t>& data, int major = 1) {
  nvfp4moe::testing::Bytes b;
  b.str("\x93NUMPY").u8(static_cast<uint8_t>(major)).u8(0);
  if (major == 1) {
    b.u16(static_cast<uint16_t>(dict.size()));
  } else {
    b.u32(static_cast<uint32_t>(dict.size()));
  }
  b.str(dict).raw(data.data(), data.size());
  return b.bytes();
}

Status parse(const std::vector<uint8_t>& b, NpyArray* a) { return parse_npy(b.data(), b.size(), "t.npy", a); }

std::string parse_error(const std::vector<uint8_t>& b) {
  NpyArray a;
  const Status s = parse(b, &a);
  EXPECT_FALSE(s.ok()) << "a hostile file parsed";
  return s.message();
}

TEST(NpyRoundTrip, EveryDTypeAndRank) {
  auto rng = std::mt19937_64(nvfp4moe::testing::test_seed());
  ScratchDir dir;
  const std::vector<std::vector<int64_t>> shapes = {{}, {0}, {5}, {2, 3}, {2, 1, 3, 2}};
  for (NpyDType dt : {NpyDType::kF32, NpyDType::kF64, NpyDType::kF16, NpyDType::kI8, NpyDType::kI16, NpyDType::kI32,
                      NpyDType::kI64, NpyDType::kU8, NpyDType::kU16, NpyDType::kU32, NpyDType::kU64,
                      NpyDType::kBool}) {
    for (const auto& shape : shapes) {
      NpyArray a;
      a.dtype = dt;
      a.shape = shape;
      a.data.resize(static_cast<size_t>(a.num_elements()) * npy_dtype_size(dt));
      for (auto& byte : a.data) byte = static_cast<uint8_t>(rng() & (dt == NpyDType::kBool ? 1 : 0xFF));
      // Through a file for one dtype (each write fsyncs), in memory for the rest.
      NpyArray b;
      Status s;
      if (dt == NpyDType::kF32) {
        const std::string path = dir.file("a.npy");
        ASSERT_TRUE(write_npy(path, a).ok());
        s = read_npy(path, &b);
      } else {
        std::vector<uint8_t> bytes;
        ASSERT_TRUE(serialize_npy(a, &bytes).ok());
        s = parse_npy(bytes.data(), bytes.size(), "a.npy", &b);
      }
      ASSERT_TRUE(s.ok()) << s.to_string();
      EXPECT_EQ(b.dtype, a.dtype) << npy_descr(dt);
      EXPECT_EQ(b.shape, a.shape);
      EXPECT_EQ(b.data, a.data);
      std::vector<uint8_t> raw;
      ASSERT_TRUE(serialize_npy(a, &raw).ok());
      const size_t header_end = raw.size() - a.data.size();
      EXPECT_EQ(header_end % 64, 0u) << "data 64-byte aligned";
      EXPECT_EQ(raw[header_end - 1], '\n');
    }
  }
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.npy"});
}

TEST(NpyRoundTrip, TypedHelpers) {
  const float f[6] = {1, -2, 3.5f, 0, 5, 6};
  const int32_t i[3] = {-7, 0, 2147483647};
  NpyArray a = NpyArray::from_f32({2, 3}, f);
  std::vector<float> fo;
  ASSERT_TRUE(a.to_f32(&fo).ok());
  EXPECT_EQ(fo, std::vector<float>(f, f + 6));
  std::vector<int32_t> io;
  EXPECT_FALSE(a.to_i32(&io).ok()) << "floats do not silently become ids";
  NpyArray b = NpyArray::from_i32({3}, i);
  ASSERT_TRUE(b.to_i32(&io).ok());
  EXPECT_EQ(io, std::vector<int32_t>(i, i + 3));
  NpyArray big;
  big.dtype = NpyDType::kI64;
  big.shape = {1};
  const int64_t v = 1LL << 40;
  big.data.assign(reinterpret_cast<const uint8_t*>(&v), reinterpret_cast<const uint8_t*>(&v) + 8);
  const Status s = big.to_i32(&io);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange);
  EXPECT_THAT(s.message(), HasSubstr("1099511627776"));
}

TEST(NpyRoundTrip, HeaderVariantsNumpyWrites) {
  const std::vector<uint8_t> four(16, 0);
  NpyArray a;
  // Version 2 and 3 headers, double quotes, no trailing comma, Python 2 longs.
  ASSERT_TRUE(parse(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }\n", four, 2), &a).ok());
  ASSERT_TRUE(parse(npy_bytes("{\"descr\": \"<i4\", \"shape\": (2, 2), \"fortran_order\": False}", four, 3), &a).ok());
  EXPECT_EQ(a.shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(a.dtype, NpyDType::kI32);
  ASSERT_TRUE(parse(npy_bytes("{'descr': '|u1', 'fortran_order': False, 'shape': (4L, 4L), }", four), &a).ok());
  ASSERT_TRUE(parse(npy_bytes("{'descr': '<f8', 'fortran_order': False, 'shape': (), }", std::vector<uint8_t>(8)), &a).ok());
  EXPECT_TRUE(a.shape.empty());
}

TEST(NpyHostile, TruncatedAtEveryByte) {
  const float f[3] = {1, 2, 3};
  std::vector<uint8_t> full;
  ASSERT_TRUE(serialize_npy(NpyArray::from_f32({3}, f), &full).ok());
  for (size_t len = 0; len < full.size(); ++len) {
    NpyArray a;
    const Status s = parse_npy(full.data(), len, "t.npy", &a);
    ASSERT_FALSE(s.ok()) << "prefix of " << len << " bytes parsed";
    EXPECT_THAT(s.message(), HasSubstr("t.npy"));
  }
}

TEST(NpyHostile, HeadersAndSizes) {
  const std::vector<uint8_t> none;
  EXPECT_THAT(parse_error(npy_bytes("{'descr': '<f4', 'fortran_order': True, 'shape': (0,), }", none)),
              HasSubstr("fortran_order is True"));
  EXPECT_THAT(parse_error(npy_bytes("{'descr': '>f4', 'fortran_order': False, 'shape': (0,), }", none)),
              HasSubstr("big-endian"));
  EXPECT_THAT(parse_error(npy_bytes("{'descr': '<c8', 'fortran_order': False, 'shape': (0,), }", none)),
              HasSubstr("'<c8' is not supported"));
  EXPECT_THAT(parse_error(npy_bytes("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (0,), }", none)),
              HasSubstr("structured"));
  EXPECT_THAT(parse_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (-1,), }", none)),
              HasSubstr("shape element"));
  EXPECT_THAT(parse_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (999999999999999999999,), }",
                                    none)),
              HasSubstr("shape element"));
  EXPECT_THAT(parse_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }",
                                    none)),
              HasSubstr("overflows"));
  EXPECT_THAT(parse_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000,), }", none)),
              HasSubstr("npy data is 0 bytes"));
  EXPECT_THAT(parse_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }",
                                    std::vector<uint8_t>(5))),
              HasSubstr("npy data is 5 bytes"));
  EXPECT_THAT(parse_error(npy_bytes("{'descr': '<f4', 'shape': (1,), }", std::vector<uint8_t>(4))),
              HasSubstr("lacks 'fortran_order'"));
  EXPECT_THAT(parse_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}",
                                    std::vector<uint8_t>(4))),
              HasSubstr("unexpected key 'x'"));
  EXPECT_THAT(parse_error(npy_bytes("{'descr': '<f4', 'fortran_order': False, 'shape': (1,) } junk",
                                    std::vector<uint8_t>(4))),
              HasSubstr("text after the dict"));
  EXPECT_THAT(parse_error(npy_bytes("{'descr': '<f4", none)), HasSubstr("unterminated"));
  EXPECT_THAT(parse_error(npy_bytes("{descr: 1}", none)), HasSubstr("expected a quoted key"));
  nvfp4moe::testing::Bytes v9;
  v9.str("\x93NUMPY").u8(9).u8(0).u16(0);
  EXPECT_THAT(parse_error(v9.bytes()), HasSubstr("version 9.0"));
  nvfp4moe::testing::Bytes long_header;
  long_header.str("\x93NUMPY").u8(2).u8(0).u32(0xFFFFFFFFu);
  EXPECT_THAT(parse_error(long_header.bytes()), HasSubstr("header length 4294967295"));
  EXPECT_THAT(parse_error({'P', 'K', 3, 4}), HasSubstr("not a .npy file"));
}

TEST(NpyHostile, RandomHeaderMutationsNeverCrash) {
  auto rng = std::mt19937_64(nvfp4moe::testing::test_seed());
  const float f[4] = {1, 2, 3, 4};
  std::vector<uint8_t> full;
  ASSERT_TRUE(serialize_npy(NpyArray::from_f32({2, 2}, f), &full).ok());
  std::uniform_int_distribution<size_t> pos(0, 80);
  const std::string alphabet = "(){}[],:'\" 0123456789-LTrueFalse<f4|u1\x93\n";
  std::uniform_int_distribution<size_t> pick(0, alphabet.size() - 1);
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> m = full;
    for (int k = 0; k < 3; ++k) m[pos(rng)] = static_cast<uint8_t>(alphabet[pick(rng)]);
    NpyArray a;
    if (parse(m, &a).ok()) EXPECT_EQ(a.data.size(), static_cast<size_t>(a.num_elements()) * npy_dtype_size(a.dtype));
  }
}

}  // namespace
}  // namespace nvfp4moe::io
