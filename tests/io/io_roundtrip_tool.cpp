// io_roundtrip_tool: a thin command-line face of the io library for the
// Python cross-checks (tests/py). Every subcommand prints JSON or writes .npy
// files; errors go to stderr with exit status 1 (2 for usage errors).
//
//   info FILE                         GGUF or safetensors listing as JSON
//   dequant FILE TENSOR OUT.npy       tensor as F32, numpy shape (GGUF: ne reversed)
//   raw FILE TENSOR OUT.npy           tensor bytes as a 1-D uint8 array
//   write-gguf OUT MANIFEST.json      GGUF from a manifest (see write_gguf)
//   write-safetensors OUT MANIFEST.json
//   load-layer PATH LAYER OUTDIR [--quantize-dense]
//                                     load_moe_layer; writes dequantized
//                                     projections (alpha applied), alphas,
//                                     router; prints the layer's facts
//   codecs OUTDIR                     e2m1 (16) and ue4m3 (256) decode tables
//   encode IN.npy OUTDIR              float_to_e2m1 / float_to_ue4m3 /
//                                     float_to_bf16 of every input value
//   npy-copy IN.npy OUT.npy           read with ours, write with ours
#include <cstdio>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "nvfp4moe/format.hpp"
#include "nvfp4moe/io.hpp"

namespace {

using namespace nvfp4moe;
using namespace nvfp4moe::io;
using json = nlohmann::json;

struct Failure {
  Status status;
};

void check(const Status& s) {
  if (!s.ok()) throw Failure{s};
}

Status usage_error(const std::string& what) { return invalid_argument("usage: ", what); }

json value_json(const GgufValue& v) {
  switch (v.type) {
    case GgufType::kString: return v.string_value;
    case GgufType::kBool: return v.uint_value != 0;
    case GgufType::kFloat32: case GgufType::kFloat64: return v.float_value;
    case GgufType::kInt8: case GgufType::kInt16: case GgufType::kInt32: case GgufType::kInt64: return v.int_value;
    case GgufType::kArray: {
      json a = json::array();
      for (uint64_t i = 0; i < v.array_size; ++i) {
        if (v.array_type == GgufType::kString) {
          a.push_back(v.array_strings[i]);
        } else if (v.array_type == GgufType::kArray) {
          a.push_back(value_json(v.array_arrays[i]));
        } else if (v.array_type == GgufType::kFloat32 || v.array_type == GgufType::kFloat64) {
          double d = 0;
          v.array_get_float(i, &d);
          a.push_back(d);
        } else if (v.array_type == GgufType::kBool) {
          int64_t b = 0;
          v.array_get_int(i, &b);
          a.push_back(b != 0);
        } else {
          int64_t x = 0;
          if (v.array_get_int(i, &x)) {
            a.push_back(x);
          } else {
            uint64_t u;
            std::memcpy(&u, v.array_bytes.data() + 8 * i, 8);
            a.push_back(u);
          }
        }
      }
      return a;
    }
    default: return v.uint_value;
  }
}

bool is_gguf(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return false;
  char magic[4] = {};
  const size_t n = std::fread(magic, 1, 4, f);
  std::fclose(f);
  return n == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

void print(const json& j) { std::cout << j.dump(1, ' ', false, json::error_handler_t::replace) << "\n"; }

int cmd_info(const std::vector<std::string>& a) {
  if (a.size() != 1) check(usage_error("info FILE"));
  json out;
  if (is_gguf(a[0])) {
    GgufFile f;
    check(GgufFile::open(a[0], &f));
    out["format"] = "gguf";
    out["version"] = f.version();
    out["alignment"] = f.alignment();
    out["data_offset"] = f.data_offset();
    json md = json::object();
    json types = json::object();
    for (const auto& [k, v] : f.metadata()) {
      md[k] = value_json(v);
      types[k] = v.type == GgufType::kArray ? std::string("array:") + gguf_type_name(v.array_type)
                                            : std::string(gguf_type_name(v.type));
    }
    out["metadata"] = md;
    out["metadata_types"] = types;
    json ts = json::array();
    for (const auto& t : f.tensors()) {
      ts.push_back({{"name", t.name}, {"type", t.type}, {"type_name", ggml_type_name(t.type)}, {"ne", t.ne},
                    {"shape", t.numpy_shape()}, {"offset", t.offset}, {"nbytes", t.nbytes}});
    }
    out["tensors"] = ts;
  } else {
    SafetensorsFile f;
    check(SafetensorsFile::open(a[0], &f));
    out["format"] = "safetensors";
    out["metadata"] = f.metadata();
    json ts = json::array();
    for (const auto& t : f.tensors()) {
      ts.push_back({{"name", t.name}, {"dtype", st_dtype_name(t.dtype)}, {"shape", t.shape}, {"begin", t.begin},
                    {"end", t.end}});
    }
    out["tensors"] = ts;
  }
  print(out);
  return 0;
}

int cmd_tensor(const std::vector<std::string>& a, bool raw) {
  if (a.size() != 3) check(usage_error(raw ? "raw FILE TENSOR OUT.npy" : "dequant FILE TENSOR OUT.npy"));
  NpyArray out;
  const uint8_t* bytes = nullptr;
  uint64_t size = 0;
  std::vector<float> values;
  std::vector<int64_t> shape;
  if (is_gguf(a[0])) {
    GgufFile f;
    check(GgufFile::open(a[0], &f));
    const GgufTensorInfo* t = f.find_tensor(a[1]);
    if (!t) check(invalid_argument(a[0], ": no tensor named '", a[1], "'"));
    shape = t->numpy_shape();
    if (raw) {
      check(f.tensor_bytes(*t, &bytes, &size));
    } else {
      check(f.read_f32(*t, &values));
    }
    if (raw) {
      out.dtype = NpyDType::kU8;
      out.shape = {static_cast<int64_t>(size)};
      out.data.assign(bytes, bytes + size);
    } else {
      out = NpyArray::from_f32(shape, values.data());
    }
  } else {
    SafetensorsFile f;
    check(SafetensorsFile::open(a[0], &f));
    const SafetensorsTensorInfo* t = f.find_tensor(a[1]);
    if (!t) check(invalid_argument(a[0], ": no tensor named '", a[1], "'"));
    if (raw) {
      check(f.tensor_bytes(*t, &bytes, &size));
      out.dtype = NpyDType::kU8;
      out.shape = {static_cast<int64_t>(size)};
      out.data.assign(bytes, bytes + size);
    } else {
      check(f.read_f32(*t, &values));
      out = NpyArray::from_f32(t->shape, values.data());
    }
  }
  check(write_npy(a[2], out));
  return 0;
}

Status type_from_name(const std::string& s, GgufType* t) {
  for (int i = 0; i <= 12; ++i) {
    if (s == gguf_type_name(static_cast<GgufType>(i))) {
      *t = static_cast<GgufType>(i);
      return ok_status();
    }
  }
  return invalid_argument("unknown GGUF value type '", s, "'");
}

// {"type": T, "value": V} or, for arrays, {"type": "array", "elem_type": T, "value": [...]}
// where nested arrays' elements are {"elem_type": T, "value": [...]}.
GgufValue manifest_value(const json& j, GgufType type);

GgufValue manifest_array(const json& j) {
  GgufType elem;
  check(type_from_name(j.at("elem_type").get<std::string>(), &elem));
  const json& v = j.at("value");
  if (elem == GgufType::kString) return GgufValue::make_string_array(v.get<std::vector<std::string>>());
  if (elem == GgufType::kArray) {
    std::vector<GgufValue> inner;
    for (const json& e : v) inner.push_back(manifest_array(e));
    return GgufValue::make_array_of_arrays(std::move(inner));
  }
  if (elem == GgufType::kFloat32 || elem == GgufType::kFloat64) {
    return GgufValue::make_array(elem, v.get<std::vector<double>>());
  }
  if (elem == GgufType::kUint64) {
    // Values above INT64_MAX travel as their two's-complement int64.
    std::vector<int64_t> vals;
    for (const json& e : v) vals.push_back(static_cast<int64_t>(e.get<uint64_t>()));
    return GgufValue::make_int_array(elem, vals);
  }
  std::vector<int64_t> vals;
  for (const json& e : v) vals.push_back(e.is_boolean() ? (e.get<bool>() ? 1 : 0) : e.get<int64_t>());
  return GgufValue::make_int_array(elem, vals);
}

GgufValue manifest_value(const json& j, GgufType type) {
  const json& v = j.at("value");
  switch (type) {
    case GgufType::kString: return GgufValue::make_string(v.get<std::string>());
    case GgufType::kBool: return GgufValue::make_bool(v.get<bool>());
    case GgufType::kFloat32: case GgufType::kFloat64: return GgufValue::make_float(type, v.get<double>());
    case GgufType::kArray: return manifest_array(j);
    case GgufType::kInt8: case GgufType::kInt16: case GgufType::kInt32: case GgufType::kInt64:
      return GgufValue::make_int(type, v.get<int64_t>());
    default: return GgufValue::make_uint(type, v.get<uint64_t>());
  }
}

json read_manifest(const std::string& path) {
  std::string text;
  check(read_text_file(path, 64 << 20, &text));
  return json::parse(text);
}

NpyArray load_npy(const std::string& path) {
  NpyArray a;
  check(read_npy(path, &a));
  return a;
}

std::vector<float> npy_f32(const NpyArray& a) {
  std::vector<float> v;
  check(a.to_f32(&v));
  return v;
}

// Manifest: {"alignment": 32, "metadata": [{"key", "type", "value", ...}],
//  "tensors": [{"name", "kind": "F32"|"F16"|"BF16"|"NVFP4_EXPERTS"|"RAW",
//               "npy": path, "type_id", "ne" (RAW only)}]}
// F32/F16/BF16 take the npy's values with ne = reversed numpy shape;
// NVFP4_EXPERTS quantizes an F32 [E, N, K] array (two-level scaling) and
// writes <name>.weight and <name>.scale.
int cmd_write_gguf(const std::vector<std::string>& a) {
  if (a.size() != 2) check(usage_error("write-gguf OUT MANIFEST.json"));
  const json m = read_manifest(a[1]);
  GgufWriter w(m.value("alignment", 32u));
  for (const json& kv : m.value("metadata", json::array())) {
    GgufType t;
    check(type_from_name(kv.at("type").get<std::string>(), &t));
    w.set(kv.at("key").get<std::string>(), manifest_value(kv, t));
  }
  for (const json& t : m.value("tensors", json::array())) {
    const std::string name = t.at("name").get<std::string>();
    const std::string kind = t.at("kind").get<std::string>();
    const NpyArray arr = load_npy(t.at("npy").get<std::string>());
    const std::vector<int64_t> ne(arr.shape.rbegin(), arr.shape.rend());
    if (kind == "RAW") {
      check(w.add_tensor(name, t.at("type_id").get<uint32_t>(), t.at("ne").get<std::vector<int64_t>>(), arr.data));
    } else if (kind == "NVFP4_EXPERTS") {
      if (arr.shape.size() != 3) check(invalid_argument(name, ": NVFP4_EXPERTS needs an [E, N, K] array"));
      const std::vector<float> v = npy_f32(arr);
      ExpertWeights e;
      QuantizeOptions opt;
      opt.global_scale = t.value("global_scale", true);
      check(quantize_experts(v.data(), arr.shape[0], arr.shape[1], arr.shape[2], opt, &e));
      check(w.add_nvfp4_experts(name, e.view()));
    } else {
      const std::vector<float> v = npy_f32(arr);
      if (kind == "F32") {
        check(w.add_f32(name, ne, v.data()));
      } else if (kind == "F16") {
        check(w.add_f16(name, ne, v.data()));
      } else if (kind == "BF16") {
        check(w.add_bf16(name, ne, v.data()));
      } else {
        check(invalid_argument("tensor kind '", kind, "' is unknown"));
      }
    }
  }
  check(w.write(a[0]));
  return 0;
}

// Manifest: {"metadata": {k: v}, "tensors": [{"name", "dtype", "npy"}],
//            "modelopt": [{"prefix", "proj", "npy"}]}
// Tensors: dtype F32/BF16 convert the npy values; any other dtype takes the
// npy's raw bytes. modelopt entries quantize an F32 [E, N, K] array.
int cmd_write_safetensors(const std::vector<std::string>& a) {
  if (a.size() != 2) check(usage_error("write-safetensors OUT MANIFEST.json"));
  const json m = read_manifest(a[1]);
  SafetensorsWriter w;
  const json metadata = m.value("metadata", json::object());
  for (const auto& [k, v] : metadata.items()) w.set_metadata(k, v.get<std::string>());
  for (const json& t : m.value("tensors", json::array())) {
    const std::string name = t.at("name").get<std::string>();
    StDType dt;
    if (!st_dtype_from_name(t.at("dtype").get<std::string>(), &dt)) check(invalid_argument("bad dtype in manifest"));
    const NpyArray arr = load_npy(t.at("npy").get<std::string>());
    if (dt == StDType::kF32) {
      check(w.add_f32(name, arr.shape, npy_f32(arr).data()));
    } else if (dt == StDType::kBF16) {
      check(w.add_bf16(name, arr.shape, npy_f32(arr).data()));
    } else {
      check(w.add_tensor(name, dt, arr.shape, arr.data));
    }
  }
  for (const json& e : m.value("modelopt", json::array())) {
    const NpyArray arr = load_npy(e.at("npy").get<std::string>());
    if (arr.shape.size() != 3) check(invalid_argument("modelopt entries need an [E, N, K] array"));
    const std::vector<float> v = npy_f32(arr);
    ExpertWeights ew;
    check(quantize_experts(v.data(), arr.shape[0], arr.shape[1], arr.shape[2], QuantizeOptions{}, &ew));
    check(w.add_modelopt_experts(e.at("prefix").get<std::string>(), e.at("proj").get<std::string>(), ew.view()));
  }
  check(w.write(a[0]));
  return 0;
}

void write_experts(const std::string& dir, const std::string& name, const ExpertWeights& w) {
  if (w.codes.empty()) return;
  std::vector<float> deq(static_cast<size_t>(w.num_experts * w.rows * w.cols));
  check(dequantize_experts(w.view(), true, deq.data()));
  check(write_npy(dir + "/" + name + ".npy", NpyArray::from_f32({w.num_experts, w.rows, w.cols}, deq.data())));
  check(write_npy(dir + "/" + name + "_alpha.npy", NpyArray::from_f32({w.num_experts}, w.alpha.data())));
}

int cmd_load_layer(const std::vector<std::string>& a) {
  if (a.size() != 3 && !(a.size() == 4 && a[3] == "--quantize-dense")) {
    check(usage_error("load-layer PATH LAYER OUTDIR [--quantize-dense]"));
  }
  MoeLoadOptions opt;
  opt.quantize_dense = a.size() == 4;
  MoeLayerFile m;
  check(load_moe_layer(a[0], std::stoll(a[1]), &m, opt));
  const std::string& dir = a[2];
  write_experts(dir, "gate", m.gate);
  write_experts(dir, "up", m.up);
  write_experts(dir, "gate_up", m.gate_up);
  write_experts(dir, "down", m.down);
  if (!m.router.empty()) {
    check(write_npy(dir + "/router.npy", NpyArray::from_f32({m.num_experts, m.hidden}, m.router.data())));
  }
  const std::pair<const char*, const std::vector<float>*> scales[] = {{"gate_input_scale", &m.gate_input_scale},
                                                                      {"up_input_scale", &m.up_input_scale},
                                                                      {"gate_up_input_scale", &m.gate_up_input_scale},
                                                                      {"down_input_scale", &m.down_input_scale}};
  for (const auto& [name, v] : scales) {
    if (!v->empty()) check(write_npy(dir + "/" + name + ".npy", NpyArray::from_f32({m.num_experts}, v->data())));
  }
  print({{"format", m.format}, {"num_experts", m.num_experts}, {"top_k", m.top_k}, {"norm_topk", m.norm_topk},
         {"merged", m.merged}, {"hidden", m.hidden}, {"ffn", m.ffn}, {"gating_func", m.gating_func},
         {"weights_scale", m.weights_scale}});
  return 0;
}

int cmd_codecs(const std::vector<std::string>& a) {
  if (a.size() != 1) check(usage_error("codecs OUTDIR"));
  std::vector<float> e2m1(16), ue4m3(256);
  for (int i = 0; i < 16; ++i) e2m1[i] = e2m1_to_float(static_cast<uint8_t>(i));
  for (int i = 0; i < 256; ++i) ue4m3[i] = ue4m3_to_float(static_cast<uint8_t>(i));
  check(write_npy(a[0] + "/e2m1.npy", NpyArray::from_f32({16}, e2m1.data())));
  check(write_npy(a[0] + "/ue4m3.npy", NpyArray::from_f32({256}, ue4m3.data())));
  return 0;
}

int cmd_encode(const std::vector<std::string>& a) {
  if (a.size() != 2) check(usage_error("encode IN.npy OUTDIR"));
  const std::vector<float> x = npy_f32(load_npy(a[0]));
  NpyArray e2m1, ue4m3, bf16;
  e2m1.dtype = ue4m3.dtype = NpyDType::kU8;
  bf16.dtype = NpyDType::kU16;
  e2m1.shape = ue4m3.shape = bf16.shape = {static_cast<int64_t>(x.size())};
  for (float v : x) {
    e2m1.data.push_back(float_to_e2m1(v));
    ue4m3.data.push_back(float_to_ue4m3(v));
    const uint16_t b = float_to_bf16(v);
    bf16.data.push_back(static_cast<uint8_t>(b));
    bf16.data.push_back(static_cast<uint8_t>(b >> 8));
  }
  check(write_npy(a[1] + "/e2m1_codes.npy", e2m1));
  check(write_npy(a[1] + "/ue4m3_codes.npy", ue4m3));
  check(write_npy(a[1] + "/bf16_bits.npy", bf16));
  return 0;
}

int cmd_npy_copy(const std::vector<std::string>& a) {
  if (a.size() != 2) check(usage_error("npy-copy IN.npy OUT.npy"));
  check(write_npy(a[1], load_npy(a[0])));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: io_roundtrip_tool info|dequant|raw|write-gguf|write-safetensors|load-layer|codecs|encode|"
                 "npy-copy ...\n";
    return 2;
  }
  const std::string cmd = argv[1];
  const std::vector<std::string> args(argv + 2, argv + argc);
  try {
    if (cmd == "info") return cmd_info(args);
    if (cmd == "dequant") return cmd_tensor(args, false);
    if (cmd == "raw") return cmd_tensor(args, true);
    if (cmd == "write-gguf") return cmd_write_gguf(args);
    if (cmd == "write-safetensors") return cmd_write_safetensors(args);
    if (cmd == "load-layer") return cmd_load_layer(args);
    if (cmd == "codecs") return cmd_codecs(args);
    if (cmd == "encode") return cmd_encode(args);
    if (cmd == "npy-copy") return cmd_npy_copy(args);
    std::cerr << "io_roundtrip_tool: unknown command '" << cmd << "'\n";
    return 2;
  } catch (const Failure& f) {
    std::cerr << f.status.to_string() << "\n";
    return f.status.code() == StatusCode::kInvalidArgument &&
                   f.status.message().rfind("usage:", 0) == 0
               ? 2
               : 1;
  } catch (const std::exception& e) {
    std::cerr << "io_roundtrip_tool: " << e.what() << "\n";
    return 1;
  }
}
