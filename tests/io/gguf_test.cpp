#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "io/io_test_util.hpp"
#include "nvfp4moe/io.hpp"
#include "nvfp4moe/layout.hpp"

namespace nvfp4moe::io {
namespace {

using ::testing::HasSubstr;
using nvfp4moe::testing::Bytes;
using nvfp4moe::testing::random_experts;
using nvfp4moe::testing::ScratchDir;

Status parse_bytes(const std::vector<uint8_t>& b, GgufFile* f) { return GgufFile::parse(b.data(), b.size(), "t.gguf", f); }

std::string parse_error(const std::vector<uint8_t>& b) {
  GgufFile f;
  const Status s = parse_bytes(b, &f);
  EXPECT_FALSE(s.ok()) << "a hostile file parsed";
  return s.message();
}

// A valid header with one tensor info, for mutation.
struct OneTensor {
  uint64_t n_tensors = 1, n_kv = 1;
  uint32_t version = 3;
  std::string key = "general.architecture";
  std::string arch = "qwen3moe";
  std::string name = "w";
  std::vector<int64_t> ne = {4, 2};
  uint32_t type = kGgmlF32;
  uint64_t offset = 0;
  size_t data_bytes = 32;

  std::vector<uint8_t> build() const {
    Bytes b;
    b.str("GGUF").u32(version).u64(n_tensors).u64(n_kv);
    b.gguf_str(key).u32(static_cast<uint32_t>(GgufType::kString)).gguf_str(arch);
    b.gguf_str(name).u32(static_cast<uint32_t>(ne.size()));
    for (int64_t d : ne) b.i64(d);
    b.u32(type).u64(offset);
    b.pad_to(32).zeros(data_bytes);
    return b.bytes();
  }
};

TEST(GgufRoundTrip, MetadataOfEveryType) {
  GgufWriter w;
  w.set("u8", GgufValue::make_uint(GgufType::kUint8, 200));
  w.set("i8", GgufValue::make_int(GgufType::kInt8, -100));
  w.set("u16", GgufValue::make_uint(GgufType::kUint16, 65000));
  w.set("i16", GgufValue::make_int(GgufType::kInt16, -32000));
  w.set("u32", GgufValue::make_uint(GgufType::kUint32, 4000000000u));
  w.set("i32", GgufValue::make_int(GgufType::kInt32, -2000000000));
  w.set("u64", GgufValue::make_uint(GgufType::kUint64, std::numeric_limits<uint64_t>::max()));
  w.set("i64", GgufValue::make_int(GgufType::kInt64, std::numeric_limits<int64_t>::min()));
  w.set("f32", GgufValue::make_float(GgufType::kFloat32, 0.1));
  w.set("f64", GgufValue::make_float(GgufType::kFloat64, 0.1));
  w.set("bool", GgufValue::make_bool(true));
  w.set("str", GgufValue::make_string(std::string("h\0llo", 5)));
  w.set("arr_f32", GgufValue::make_array(GgufType::kFloat32, {1.5, -2.25}));
  w.set("arr_i64", GgufValue::make_int_array(GgufType::kInt64, {-1, 1LL << 40}));
  w.set("arr_bool", GgufValue::make_int_array(GgufType::kBool, {1, 0, 1}));
  w.set("arr_str", GgufValue::make_string_array({"a", "", "ccc"}));
  w.set("arr_nested", GgufValue::make_array_of_arrays({GgufValue::make_int_array(GgufType::kUint8, {1, 2}),
                                                       GgufValue::make_string_array({"x"})}));
  w.set("arr_empty", GgufValue::make_int_array(GgufType::kUint32, {}));
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(w.serialize(&bytes).ok());

  GgufFile f;
  const Status s = parse_bytes(bytes, &f);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata().size(), 18u);
  EXPECT_EQ(f.metadata()[0].first, "u8");  // file order kept
  uint64_t u;
  int64_t i;
  double d;
  bool b;
  std::string str;
  ASSERT_TRUE(f.get_uint("u8", &u).ok());
  EXPECT_EQ(u, 200u);
  ASSERT_TRUE(f.get_int("i8", &i).ok());
  EXPECT_EQ(i, -100);
  ASSERT_TRUE(f.get_uint("u16", &u).ok());
  EXPECT_EQ(u, 65000u);
  ASSERT_TRUE(f.get_int("i16", &i).ok());
  EXPECT_EQ(i, -32000);
  ASSERT_TRUE(f.get_uint("u32", &u).ok());
  EXPECT_EQ(u, 4000000000u);
  ASSERT_TRUE(f.get_int("i32", &i).ok());
  EXPECT_EQ(i, -2000000000);
  ASSERT_TRUE(f.get_uint("u64", &u).ok());
  EXPECT_EQ(u, std::numeric_limits<uint64_t>::max());
  EXPECT_FALSE(f.get_int("u64", &i).ok()) << "u64 max does not fit int64";
  ASSERT_TRUE(f.get_int("i64", &i).ok());
  EXPECT_EQ(i, std::numeric_limits<int64_t>::min());
  EXPECT_FALSE(f.get_uint("i64", &u).ok());
  ASSERT_TRUE(f.get_float("f32", &d).ok());
  EXPECT_EQ(d, static_cast<double>(0.1f));
  ASSERT_TRUE(f.get_float("f64", &d).ok());
  EXPECT_EQ(d, 0.1);
  ASSERT_TRUE(f.get_bool("bool", &b).ok());
  EXPECT_TRUE(b);
  ASSERT_TRUE(f.get_string("str", &str).ok());
  EXPECT_EQ(str, std::string("h\0llo", 5));

  const GgufValue* a = f.find("arr_f32");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->array_type, GgufType::kFloat32);
  ASSERT_EQ(a->array_size, 2u);
  ASSERT_TRUE(a->array_get_float(1, &d));
  EXPECT_EQ(d, -2.25);
  EXPECT_FALSE(a->array_get_float(2, &d)) << "index past the end";
  a = f.find("arr_i64");
  ASSERT_TRUE(a->array_get_int(1, &i));
  EXPECT_EQ(i, 1LL << 40);
  a = f.find("arr_bool");
  ASSERT_EQ(a->array_size, 3u);
  ASSERT_TRUE(a->array_get_int(2, &i));
  EXPECT_EQ(i, 1);
  a = f.find("arr_str");
  EXPECT_EQ(a->array_strings, (std::vector<std::string>{"a", "", "ccc"}));
  a = f.find("arr_nested");
  ASSERT_EQ(a->array_arrays.size(), 2u);
  EXPECT_EQ(a->array_arrays[0].array_type, GgufType::kUint8);
  EXPECT_EQ(a->array_arrays[1].array_strings, std::vector<std::string>{"x"});
  EXPECT_EQ(f.find("arr_empty")->array_size, 0u);

  // Wrong-type and missing lookups name the key.
  Status bad = f.get_string("u8", &str);
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("'u8'"));
  bad = f.get_uint("nope", &u);
  EXPECT_THAT(bad.message(), HasSubstr("'nope' is missing"));
}

TEST(GgufRoundTrip, FloatTensorsInGgmlOrder) {
  auto rng = std::mt19937_64(nvfp4moe::testing::test_seed());
  const std::vector<float> v = nvfp4moe::testing::random_normal(rng, 6 * 4, 1.0f);
  GgufWriter w;
  ASSERT_TRUE(w.add_f32("a", {6, 4}, v.data()).ok());
  ASSERT_TRUE(w.add_f16("b", {6, 4}, v.data()).ok());
  ASSERT_TRUE(w.add_bf16("c", {6, 4}, v.data()).ok());
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(w.serialize(&bytes).ok());
  GgufFile f;
  ASSERT_TRUE(parse_bytes(bytes, &f).ok());
  ASSERT_EQ(f.tensors().size(), 3u);
  const GgufTensorInfo* a = f.find_tensor("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->ne, (std::vector<int64_t>{6, 4}));
  EXPECT_EQ(a->numpy_shape(), (std::vector<int64_t>{4, 6}));
  EXPECT_EQ(a->nbytes, 96u);
  std::vector<float> got;
  ASSERT_TRUE(f.read_f32(*a, &got).ok());
  EXPECT_EQ(got, v);
  ASSERT_TRUE(f.read_f32(*f.find_tensor("c"), &got).ok());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(got[i], round_to_bf16(v[i])) << i;
  ASSERT_TRUE(f.read_f32(*f.find_tensor("b"), &got).ok());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(got[i], v[i], std::fabs(v[i]) * 0x1p-11f + 1e-7f) << i;
  for (const auto& t : f.tensors()) EXPECT_EQ((f.data_offset() + t.offset) % 32, 0u) << t.name;
}

TEST(GgufRoundTrip, F16ConversionIsExactOnRepresentableValues) {
  // Every finite F16 bit pattern survives F16 -> F32 (reader) -> F16 (writer);
  // this pins down both conversions, subnormals and signed zeros included.
  std::vector<uint16_t> patterns;
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7C00) != 0x7C00) patterns.push_back(static_cast<uint16_t>(h));
  }
  const auto n = static_cast<int64_t>(patterns.size());
  std::vector<uint8_t> raw(patterns.size() * 2);
  std::memcpy(raw.data(), patterns.data(), raw.size());
  GgufWriter w;
  ASSERT_TRUE(w.add_tensor("h", kGgmlF16, {n}, raw).ok());
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(w.serialize(&bytes).ok());
  GgufFile f;
  ASSERT_TRUE(parse_bytes(bytes, &f).ok());
  std::vector<float> values;
  ASSERT_TRUE(f.read_f32(f.tensors()[0], &values).ok());
  EXPECT_EQ(values[0x3C00], 1.0f);
  EXPECT_EQ(values[1], 0x1p-24f);

  GgufWriter back;
  ASSERT_TRUE(back.add_f16("all", {n}, values.data()).ok());
  ASSERT_TRUE(back.serialize(&bytes).ok());
  ASSERT_TRUE(parse_bytes(bytes, &f).ok());
  const uint8_t* p;
  uint64_t size;
  ASSERT_TRUE(f.tensor_bytes(f.tensors()[0], &p, &size).ok());
  ASSERT_EQ(size, raw.size());
  for (size_t i = 0; i < patterns.size(); ++i) {
    const uint16_t got = static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8));
    ASSERT_EQ(got, patterns[i]) << "value " << values[i];
  }
}

TEST(GgufRoundTrip, Nvfp4ExpertsWithScale) {
  auto rng = std::mt19937_64(nvfp4moe::testing::test_seed());
  const ExpertWeights src = random_experts(rng, 3, 5, 128);
  GgufWriter w;
  ASSERT_TRUE(w.add_nvfp4_experts("blk.0.ffn_up_exps", src.view()).ok());
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(w.serialize(&bytes).ok());
  GgufFile f;
  ASSERT_TRUE(parse_bytes(bytes, &f).ok());
  const GgufTensorInfo* t = f.find_tensor("blk.0.ffn_up_exps.weight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, kGgmlNvfp4);
  EXPECT_EQ(t->ne, (std::vector<int64_t>{128, 5, 3}));
  EXPECT_EQ(t->nbytes, 3u * 5 * 2 * 36);
  ExpertWeights back;
  ASSERT_TRUE(f.read_nvfp4_experts(*t, &back).ok());
  EXPECT_TRUE(back.alpha.empty());
  std::vector<float> scale;
  ASSERT_TRUE(f.read_f32(*f.find_tensor("blk.0.ffn_up_exps.scale"), &scale).ok());
  back.alpha = scale;
  nvfp4moe::testing::expect_same_experts(src, back);

  // read_f32 of an NVFP4 tensor is the exact dequantization without alpha.
  std::vector<float> deq, want(static_cast<size_t>(3 * 5 * 128));
  ASSERT_TRUE(f.read_f32(*t, &deq).ok());
  ASSERT_TRUE(dequantize_experts(src.view(), false, want.data()).ok());
  EXPECT_EQ(deq, want);
}

TEST(GgufRoundTrip, CustomAlignmentAndFileWrite) {
  ScratchDir dir;
  GgufWriter w(256);
  const float x[3] = {1, 2, 3};
  ASSERT_TRUE(w.add_f32("x", {3}, x).ok());
  ASSERT_TRUE(w.add_f32("y", {3}, x).ok());
  const std::string path = dir.file("a.gguf");
  ASSERT_TRUE(w.write(path).ok());
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"a.gguf"}) << "temporary file left behind";
  GgufFile f;
  const Status s = GgufFile::open(path, &f);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(f.alignment(), 256u);
  EXPECT_EQ(f.data_offset() % 256, 0u);
  EXPECT_EQ(f.find_tensor("y")->offset, 256u);
  uint64_t a;
  ASSERT_TRUE(f.get_uint("general.alignment", &a).ok());
  EXPECT_EQ(a, 256u);
  GgufFile missing;
  const Status m = GgufFile::open(dir.file("none.gguf"), &missing);
  EXPECT_EQ(m.code(), StatusCode::kIoError);
  EXPECT_THAT(m.message(), HasSubstr("none.gguf"));
}

TEST(GgufRoundTrip, VersionTwoIsAccepted) {
  OneTensor t;
  t.version = 2;
  GgufFile f;
  EXPECT_TRUE(parse_bytes(t.build(), &f).ok());
  EXPECT_EQ(f.version(), 2u);
}

TEST(GgufRoundTrip, UnknownAndUnsupportedTypesListButRefuseReads) {
  OneTensor t;
  t.type = 12;  // Q4_K: known size, not readable
  t.ne = {256, 1};
  t.data_bytes = 144;
  GgufFile f;
  ASSERT_TRUE(parse_bytes(t.build(), &f).ok());
  EXPECT_TRUE(f.tensors()[0].size_known);
  std::vector<float> out;
  Status s = f.read_f32(f.tensors()[0], &out);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("Q4_K"));

  t.type = 999;  // unknown id: listed, size unknown
  ASSERT_TRUE(parse_bytes(t.build(), &f).ok());
  EXPECT_FALSE(f.tensors()[0].size_known);
  s = f.read_f32(f.tensors()[0], &out);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("type 999"));
}

// ---- hostile files ----------------------------------------------------------

TEST(GgufHostile, TruncatedAtEveryByte) {
  auto rng = std::mt19937_64(nvfp4moe::testing::test_seed());
  const ExpertWeights e = random_experts(rng, 2, 2, 64);
  GgufWriter w;
  w.set("general.architecture", GgufValue::make_string("qwen3moe"));
  w.set("nested", GgufValue::make_array_of_arrays({GgufValue::make_string_array({"ab", "c"})}));
  w.set("f", GgufValue::make_array(GgufType::kFloat64, {1, 2}));
  ASSERT_TRUE(w.add_nvfp4_experts("blk.0.ffn_down_exps", e.view()).ok());
  std::vector<uint8_t> full;
  ASSERT_TRUE(w.serialize(&full).ok());
  GgufFile f;
  ASSERT_TRUE(parse_bytes(full, &f).ok());
  uint64_t data_end = 0;
  for (const auto& t : f.tensors()) data_end = std::max(data_end, f.data_offset() + t.offset + t.nbytes);
  for (size_t len = 0; len < full.size(); ++len) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + len);
    GgufFile g;
    const Status s = parse_bytes(cut, &g);
    if (len < data_end) {
      ASSERT_FALSE(s.ok()) << "prefix of " << len << " bytes parsed";
      EXPECT_EQ(s.code(), StatusCode::kFormatError) << s.to_string();
      EXPECT_THAT(s.message(), HasSubstr("t.gguf")) << s.to_string();
    } else {
      EXPECT_TRUE(s.ok()) << "only trailing padding is missing: " << s.to_string();
    }
  }
}

TEST(GgufHostile, BadMagicAndVersions) {
  OneTensor t;
  std::vector<uint8_t> b = t.build();
  b[0] = 'X';
  EXPECT_THAT(parse_error(b), HasSubstr("bad magic"));
  t.version = 1;
  EXPECT_THAT(parse_error(t.build()), HasSubstr("version 1"));
  t.version = 4;
  EXPECT_THAT(parse_error(t.build()), HasSubstr("version 4"));
  t.version = 0x03000000;  // a big-endian v3 file read little-endian
  EXPECT_THAT(parse_error(t.build()), HasSubstr("big-endian"));
  EXPECT_THAT(parse_error({}), HasSubstr("too short"));
}

TEST(GgufHostile, HugeCounts) {
  OneTensor t;
  t.n_kv = 1ULL << 62;
  EXPECT_THAT(parse_error(t.build()), HasSubstr("metadata count 4611686018427387904"));
  t = OneTensor();
  t.n_tensors = ~0ULL;
  EXPECT_THAT(parse_error(t.build()), HasSubstr("tensor count 18446744073709551615"));
}

TEST(GgufHostile, StringLengthPastEnd) {
  Bytes b;
  b.str("GGUF").u32(3).u64(0).u64(1).u64(~0ULL).str("k").zeros(16);
  EXPECT_THAT(parse_error(b.bytes()), HasSubstr("key length 18446744073709551615"));
  Bytes v;
  v.str("GGUF").u32(3).u64(0).u64(1).gguf_str("key").u32(8).u64(1000).str("short").zeros(8);
  const std::string msg = parse_error(v.bytes());
  EXPECT_THAT(msg, HasSubstr("'key'"));
  EXPECT_THAT(msg, HasSubstr("string value length 1000"));
}

TEST(GgufHostile, ArraysTooLongNestedTooDeepOrMistyped) {
  Bytes a;
  a.str("GGUF").u32(3).u64(0).u64(1).gguf_str("arr").u32(9).u32(5).u64(1ULL << 61).u32(1);
  EXPECT_THAT(parse_error(a.bytes()), HasSubstr("array of 2305843009213693952 int32"));

  Bytes deep;
  deep.str("GGUF").u32(3).u64(0).u64(1).gguf_str("deep").u32(9);
  for (int i = 0; i < 20; ++i) deep.u32(9).u64(1);
  deep.u32(0).u64(0);
  EXPECT_THAT(parse_error(deep.bytes()), HasSubstr("nested deeper"));

  Bytes bad_elem;
  bad_elem.str("GGUF").u32(3).u64(0).u64(1).gguf_str("arr").u32(9).u32(77).u64(0);
  EXPECT_THAT(parse_error(bad_elem.bytes()), HasSubstr("element type 77"));

  Bytes bad_type;
  bad_type.str("GGUF").u32(3).u64(0).u64(1).gguf_str("k").u32(13).u32(0);
  EXPECT_THAT(parse_error(bad_type.bytes()), HasSubstr("value type 13"));

  Bytes bad_bool;
  bad_bool.str("GGUF").u32(3).u64(0).u64(1).gguf_str("b").u32(7).u8(2);
  EXPECT_THAT(parse_error(bad_bool.bytes()), HasSubstr("bool value is 2"));

  Bytes dup;
  dup.str("GGUF").u32(3).u64(0).u64(2).gguf_str("k").u32(0).u8(1).gguf_str("k").u32(0).u8(2);
  EXPECT_THAT(parse_error(dup.bytes()), HasSubstr("'k' appears twice"));
}

TEST(GgufHostile, Alignment) {
  for (uint32_t bad : {0u, 3u, 48u}) {
    Bytes b;
    b.str("GGUF").u32(3).u64(0).u64(1).gguf_str("general.alignment").u32(4).u32(bad);
    EXPECT_THAT(parse_error(b.bytes()), HasSubstr("general.alignment = " + std::to_string(bad)));
  }
  Bytes typed;
  typed.str("GGUF").u32(3).u64(0).u64(1).gguf_str("general.alignment").u32(10).u64(32);
  EXPECT_THAT(parse_error(typed.bytes()), HasSubstr("expected uint32"));

  OneTensor t;
  t.offset = 8;  // not a multiple of 32
  EXPECT_THAT(parse_error(t.build()), HasSubstr("data offset 8 is not a multiple of the alignment 32"));
}

TEST(GgufHostile, TensorInfoFields) {
  OneTensor t;
  t.ne = {4, 2, 1, 1, 1};
  EXPECT_THAT(parse_error(t.build()), HasSubstr("dimension count 5"));
  t.ne = {4, -2};
  EXPECT_THAT(parse_error(t.build()), HasSubstr("ne[1] = -2 is negative"));
  t.ne = {1LL << 40, 1LL << 40};
  EXPECT_THAT(parse_error(t.build()), HasSubstr("overflows"));
  t.ne = {100, 1};
  t.type = kGgmlNvfp4;
  EXPECT_THAT(parse_error(t.build()), HasSubstr("ne[0] = 100 is not a multiple of NVFP4's block of 64"));
}

TEST(GgufHostile, DataPastEndAndOverlap) {
  OneTensor t;
  t.offset = 1ULL << 63;
  EXPECT_THAT(parse_error(t.build()), HasSubstr("ends past the end of the file"));
  t = OneTensor();
  t.data_bytes = 31;  // the F32 [4, 2] tensor needs 32
  const std::string msg = parse_error(t.build());
  EXPECT_THAT(msg, HasSubstr("'w'"));
  EXPECT_THAT(msg, HasSubstr("ends past the end"));
  t.offset = ~0ULL - 31;  // offset + size wraps around
  EXPECT_THAT(parse_error(t.build()), HasSubstr("ends past the end"));

  Bytes o;
  o.str("GGUF").u32(3).u64(2).u64(0);
  o.gguf_str("a").u32(1).i64(16).u32(kGgmlF32).u64(0);   // [0, 64)
  o.gguf_str("b").u32(1).i64(8).u32(kGgmlF32).u64(32);   // [32, 64)
  o.pad_to(32).zeros(64);
  EXPECT_THAT(parse_error(o.bytes()), HasSubstr("overlap"));

  Bytes dup;
  dup.str("GGUF").u32(3).u64(2).u64(0);
  dup.gguf_str("a").u32(1).i64(8).u32(kGgmlF32).u64(0);
  dup.gguf_str("a").u32(1).i64(8).u32(kGgmlF32).u64(32);
  dup.pad_to(32).zeros(64);
  EXPECT_THAT(parse_error(dup.bytes()), HasSubstr("name appears twice"));
}

// Found by fuzz/gguf_fuzz: zero-element tensors whose other dimensions are
// huge passed the size checks (0 bytes) and then sized row buffers from ne[0].
TEST(GgufHostile, EmptyTensorsWithHugeRows) {
  for (uint32_t type : {kGgmlF32, kGgmlNvfp4}) {
    Bytes b;
    b.str("GGUF").u32(3).u64(1).u64(0);
    b.gguf_str("blk.1.ffn_gate_up_exps.weight").u32(3).i64(1LL << 60).i64(0).i64(1).u32(type).u64(0);
    b.pad_to(32);
    GgufFile f;
    const Status s = parse_bytes(b.bytes(), &f);
    ASSERT_TRUE(s.ok()) << s.to_string();
    std::vector<float> out(3, 1.0f);
    EXPECT_TRUE(f.read_f32(f.tensors()[0], &out).ok());
    EXPECT_TRUE(out.empty());
    ExpertWeights w;
    if (type == kGgmlNvfp4) EXPECT_THAT(f.read_nvfp4_experts(f.tensors()[0], &w).message(), HasSubstr("empty"));
    MoeLayerFile m;
    EXPECT_FALSE(load_moe_layer(f, 1, &m).ok());
  }
}

TEST(GgufHostile, ViewsRefuseInfosOfAnotherFile) {
  OneTensor t;
  GgufFile f;
  ASSERT_TRUE(parse_bytes(t.build(), &f).ok());
  GgufTensorInfo forged = f.tensors()[0];
  forged.offset = 1 << 20;
  const uint8_t* p;
  uint64_t n;
  EXPECT_EQ(f.tensor_bytes(forged, &p, &n).code(), StatusCode::kInvalidArgument);
  forged = f.tensors()[0];
  forged.ne = {4, 2000};  // more values than its 32 bytes
  std::vector<float> out;
  EXPECT_EQ(f.read_f32(forged, &out).code(), StatusCode::kInvalidArgument);
  forged.ne = {-4, 2};
  EXPECT_EQ(f.read_f32(forged, &out).code(), StatusCode::kInvalidArgument);
}

TEST(GgufHostile, RandomByteFlipsNeverCrash) {
  auto rng = std::mt19937_64(nvfp4moe::testing::test_seed());
  const ExpertWeights e = random_experts(rng, 2, 2, 64);
  GgufWriter w;
  w.set("general.architecture", GgufValue::make_string("x"));
  w.set("x.expert_count", GgufValue::make_uint(GgufType::kUint32, 2));
  ASSERT_TRUE(w.add_nvfp4_experts("blk.0.ffn_gate_exps", e.view()).ok());
  ASSERT_TRUE(w.add_nvfp4_experts("blk.0.ffn_up_exps", e.view()).ok());
  std::vector<uint8_t> full;
  ASSERT_TRUE(w.serialize(&full).ok());
  std::uniform_int_distribution<size_t> pos(0, full.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int iter = 0; iter < 2000; ++iter) {
    std::vector<uint8_t> m = full;
    for (int k = 0; k < 3; ++k) m[pos(rng)] = static_cast<uint8_t>(byte(rng));
    GgufFile f;
    if (!parse_bytes(m, &f).ok()) continue;
    for (const auto& t : f.tensors()) {
      std::vector<float> out;
      (void)f.read_f32(t, &out);
    }
    MoeLayerFile layer;
    (void)load_moe_layer(f, 0, &layer);
  }
}

// ---- MoE layers ------------------------------------------------------------

struct LayerSpec {
  int64_t E = 4, H = 128, F = 64;
  bool merged = false;
  bool scalar_scale = false;
};

GgufWriter moe_writer(std::mt19937_64& rng, const LayerSpec& s, ExpertWeights* gate, ExpertWeights* up,
                      ExpertWeights* down, std::vector<float>* router) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::make_string("qwen3moe"));
  w.set("qwen3moe.expert_count", GgufValue::make_uint(GgufType::kUint32, static_cast<uint64_t>(s.E)));
  w.set("qwen3moe.expert_used_count", GgufValue::make_uint(GgufType::kUint32, 2));
  w.set("qwen3moe.expert_weights_norm", GgufValue::make_bool(true));
  w.set("qwen3moe.expert_gating_func", GgufValue::make_uint(GgufType::kUint32, 1));
  *gate = random_experts(rng, s.E, s.F, s.H);
  *up = random_experts(rng, s.E, s.F, s.H);
  *down = random_experts(rng, s.E, s.H, s.F);
  if (s.merged) {
    ExpertWeights gu;
    gu.num_experts = s.E;
    gu.rows = 2 * s.F;
    gu.cols = s.H;
    const size_t cb = static_cast<size_t>(s.F * s.H / 2), sb = static_cast<size_t>(s.F * s.H / 16);
    for (int64_t e = 0; e < s.E; ++e) {
      gu.codes.insert(gu.codes.end(), gate->codes.begin() + e * cb, gate->codes.begin() + (e + 1) * cb);
      gu.codes.insert(gu.codes.end(), up->codes.begin() + e * cb, up->codes.begin() + (e + 1) * cb);
      gu.scales.insert(gu.scales.end(), gate->scales.begin() + e * sb, gate->scales.begin() + (e + 1) * sb);
      gu.scales.insert(gu.scales.end(), up->scales.begin() + e * sb, up->scales.begin() + (e + 1) * sb);
    }
    gu.alpha = gate->alpha;
    *gate = gu;
    EXPECT_TRUE(w.add_nvfp4_experts("blk.1.ffn_gate_up_exps", gate->view()).ok());
  } else {
    EXPECT_TRUE(w.add_nvfp4_experts("blk.1.ffn_gate_exps", gate->view()).ok());
    EXPECT_TRUE(w.add_nvfp4_experts("blk.1.ffn_up_exps", up->view()).ok());
  }
  if (s.scalar_scale) {
    ExpertWeights d = *down;
    d.alpha.clear();
    EXPECT_TRUE(w.add_nvfp4_experts("blk.1.ffn_down_exps", d.view()).ok());
    const float one_scale = 0.5f;
    EXPECT_TRUE(w.add_f32("blk.1.ffn_down_exps.scale", {1}, &one_scale).ok());
    down->alpha.assign(static_cast<size_t>(s.E), 0.5f);
  } else {
    EXPECT_TRUE(w.add_nvfp4_experts("blk.1.ffn_down_exps", down->view()).ok());
  }
  std::vector<float> in_scale(static_cast<size_t>(s.E), 3.0f);
  EXPECT_TRUE(w.add_f32("blk.1.ffn_down_exps.input_scale", {s.E}, in_scale.data()).ok());
  *router = nvfp4moe::testing::random_normal(rng, static_cast<size_t>(s.E * s.H), 1.0f);
  EXPECT_TRUE(w.add_bf16("blk.1.ffn_gate_inp.weight", {s.H, s.E}, router->data()).ok());
  for (float& r : *router) r = round_to_bf16(r);
  return w;
}

TEST(GgufMoeLayer, SeparateGateUp) {
  auto rng = std::mt19937_64(nvfp4moe::testing::test_seed());
  ExpertWeights gate, up, down;
  std::vector<float> router;
  LayerSpec spec;
  GgufWriter w = moe_writer(rng, spec, &gate, &up, &down, &router);
  ScratchDir dir;
  ASSERT_TRUE(w.write(dir.file("m.gguf")).ok());
  MoeLayerFile m;
  const Status s = load_moe_layer(dir.file("m.gguf"), 1, &m);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(m.format, "gguf");
  EXPECT_EQ(m.num_experts, 4);
  EXPECT_EQ(m.top_k, 2);
  EXPECT_TRUE(m.norm_topk);
  EXPECT_EQ(m.gating_func, 1);
  EXPECT_EQ(m.hidden, 128);
  EXPECT_EQ(m.ffn, 64);
  EXPECT_FALSE(m.merged);
  nvfp4moe::testing::expect_same_experts(m.gate, gate);
  nvfp4moe::testing::expect_same_experts(m.up, up);
  nvfp4moe::testing::expect_same_experts(m.down, down);
  EXPECT_EQ(m.router, router);
  EXPECT_EQ(m.down_input_scale, std::vector<float>(4, 3.0f));
  EXPECT_TRUE(m.gate_input_scale.empty());
  const MoeLayerWeights v = m.weights();
  EXPECT_FALSE(v.merged());
  EXPECT_TRUE(validate_weights(v.gate, "gate").ok());
  EXPECT_TRUE(validate_weights(v.down, "down").ok());

  std::vector<int64_t> layers;
  ASSERT_TRUE(list_moe_layers(dir.file("m.gguf"), &layers).ok());
  EXPECT_EQ(layers, std::vector<int64_t>{1});
  const Status missing = load_moe_layer(dir.file("m.gguf"), 0, &m);
  EXPECT_FALSE(missing.ok());
  EXPECT_THAT(missing.message(), HasSubstr("layer 0 has no MoE expert tensors"));
  EXPECT_THAT(missing.message(), HasSubstr("layers with experts: 1"));
}

TEST(GgufMoeLayer, MergedGateUpAndScalarScale) {
  auto rng = std::mt19937_64(nvfp4moe::testing::test_seed());
  ExpertWeights gate_up, up, down;
  std::vector<float> router;
  LayerSpec spec;
  spec.merged = true;
  spec.scalar_scale = true;
  GgufWriter w = moe_writer(rng, spec, &gate_up, &up, &down, &router);
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(w.serialize(&bytes).ok());
  GgufFile f;
  ASSERT_TRUE(parse_bytes(bytes, &f).ok());
  MoeLayerFile m;
  const Status s = load_moe_layer(f, 1, &m);
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_TRUE(m.merged);
  EXPECT_EQ(m.ffn, 64);
  nvfp4moe::testing::expect_same_experts(m.gate_up, gate_up);
  nvfp4moe::testing::expect_same_experts(m.down, down);
  EXPECT_TRUE(m.weights().merged());
}

TEST(GgufMoeLayer, InconsistentFilesAreNamed) {
  auto rng = std::mt19937_64(nvfp4moe::testing::test_seed());
  ExpertWeights gate, up, down;
  std::vector<float> router;
  GgufWriter w = moe_writer(rng, LayerSpec(), &gate, &up, &down, &router);
  std::vector<uint8_t> bytes;

  GgufWriter count = w;
  count.set("qwen3moe.expert_count", GgufValue::make_uint(GgufType::kUint32, 8));
  ASSERT_TRUE(count.serialize(&bytes).ok());
  GgufFile f;
  ASSERT_TRUE(parse_bytes(bytes, &f).ok());
  MoeLayerFile m;
  Status s = load_moe_layer(f, 1, &m);
  EXPECT_THAT(s.message(), HasSubstr("qwen3moe.expert_count = 8"));

  GgufWriter k = w;
  k.set("qwen3moe.expert_used_count", GgufValue::make_uint(GgufType::kUint32, 9));
  ASSERT_TRUE(k.serialize(&bytes).ok());
  ASSERT_TRUE(parse_bytes(bytes, &f).ok());
  s = load_moe_layer(f, 1, &m);
  EXPECT_THAT(s.message(), HasSubstr("expert_used_count = 9"));

  const float neg[4] = {1, 1, -1, 1};
  GgufWriter scale3;
  ASSERT_TRUE(scale3.add_nvfp4_experts("blk.1.ffn_gate_exps", ExpertWeightsView{gate.num_experts, gate.rows, gate.cols,
                                                                                gate.codes.data(), gate.scales.data(),
                                                                                nullptr})
                  .ok());
  ASSERT_TRUE(scale3.add_f32("blk.1.ffn_gate_exps.scale", {4}, neg).ok());
  ASSERT_TRUE(scale3.add_nvfp4_experts("blk.1.ffn_up_exps", up.view()).ok());
  ASSERT_TRUE(scale3.add_nvfp4_experts("blk.1.ffn_down_exps", down.view()).ok());
  ASSERT_TRUE(scale3.serialize(&bytes).ok());
  ASSERT_TRUE(parse_bytes(bytes, &f).ok());
  s = load_moe_layer(f, 1, &m);
  EXPECT_THAT(s.message(), HasSubstr("'blk.1.ffn_gate_exps.scale'[2] = -1"));

  GgufWriter no_up;
  ASSERT_TRUE(no_up.add_nvfp4_experts("blk.1.ffn_gate_exps", gate.view()).ok());
  ASSERT_TRUE(no_up.add_nvfp4_experts("blk.1.ffn_down_exps", down.view()).ok());
  ASSERT_TRUE(no_up.serialize(&bytes).ok());
  ASSERT_TRUE(parse_bytes(bytes, &f).ok());
  s = load_moe_layer(f, 1, &m);
  EXPECT_THAT(s.message(), HasSubstr("blk.1.ffn_up_exps.weight is missing"));

  GgufWriter swapped;  // down given the gate's shape
  ASSERT_TRUE(swapped.add_nvfp4_experts("blk.1.ffn_gate_exps", gate.view()).ok());
  ASSERT_TRUE(swapped.add_nvfp4_experts("blk.1.ffn_up_exps", up.view()).ok());
  ASSERT_TRUE(swapped.add_nvfp4_experts("blk.1.ffn_down_exps", gate.view()).ok());
  ASSERT_TRUE(swapped.serialize(&bytes).ok());
  ASSERT_TRUE(parse_bytes(bytes, &f).ok());
  s = load_moe_layer(f, 1, &m);
  EXPECT_THAT(s.message(), HasSubstr("down must be [E, H, F]"));
}

TEST(GgufMoeLayer, DenseExpertsNeedQuantizeOption) {
  auto rng = std::mt19937_64(nvfp4moe::testing::test_seed());
  const int64_t E = 2, H = 64, F = 64;
  const std::vector<float> g = nvfp4moe::testing::random_normal(rng, E * F * H, 0.1f);
  const std::vector<float> d = nvfp4moe::testing::random_normal(rng, E * H * F, 0.1f);
  GgufWriter w;
  ASSERT_TRUE(w.add_bf16("blk.0.ffn_gate_exps.weight", {H, F, E}, g.data()).ok());
  ASSERT_TRUE(w.add_bf16("blk.0.ffn_up_exps.weight", {H, F, E}, g.data()).ok());
  ASSERT_TRUE(w.add_f32("blk.0.ffn_down_exps.weight", {F, H, E}, d.data()).ok());
  std::vector<uint8_t> bytes;
  ASSERT_TRUE(w.serialize(&bytes).ok());
  GgufFile f;
  ASSERT_TRUE(parse_bytes(bytes, &f).ok());
  MoeLayerFile m;
  Status s = load_moe_layer(f, 0, &m);
  EXPECT_EQ(s.code(), StatusCode::kUnsupported);
  EXPECT_THAT(s.message(), HasSubstr("quantize_dense"));
  MoeLoadOptions opt;
  opt.quantize_dense = true;
  s = load_moe_layer(f, 0, &m, opt);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ExpertWeights want;
  ASSERT_TRUE(quantize_experts(d.data(), E, H, F, opt.quantize, &want).ok());
  nvfp4moe::testing::expect_same_experts(m.down, want);
  EXPECT_EQ(m.top_k, 0) << "no metadata: k unknown";
}

}  // namespace
}  // namespace nvfp4moe::io
