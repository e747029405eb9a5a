// File formats: GGUF (llama.cpp), safetensors (Hugging Face / ModelOpt), .npy.
//
// Every reader treats its input as hostile: each offset, size and count is
// checked with overflow-safe arithmetic before anything is read, nothing is
// read out of bounds, and every failure is a Status whose message names the
// file, the field and the value, e.g.
//   "m.gguf: tensor #3 'blk.0.ffn_up_exps.weight': data [4096, 4132) ends past
//    the end of the file (data section is 4100 bytes)".
// Files are memory-mapped read-only; tensor views point into the mapping
// (zero-copy) and stay valid while the object that handed them out, or a copy
// of it, is alive. Each parser also has an in-memory entry point (parse from a
// byte buffer), used by the fuzz targets.
//
// Every writer goes through AtomicFile: the bytes go to a temporary file in the
// destination's directory, which is fsync'ed and renamed over the destination,
// so a reader never sees a half-written file.
//
// Shape conventions
//   ggml/GGUF lists dimensions fastest-varying first: ne = [K, N, E] for a MoE
//   expert tensor (K = input features = row length, N = output features,
//   E = experts). The numpy / PyTorch / safetensors shape is the reverse,
//   [E, N, K]. GgufTensorInfo::ne keeps the ggml order; numpy_shape() reverses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nvfp4moe/format.hpp"
#include "nvfp4moe/ops.hpp"
#include "nvfp4moe/status.hpp"

namespace nvfp4moe::io {

// ---- bytes and files -------------------------------------------------------

// Read-only bytes of a whole file (memory-mapped) or of an in-memory copy.
// Shared by every view into it.
class FileBytes {
 public:
  // Maps `path` read-only. An empty file gives size() == 0.
  static Status map(const std::string& path, std::shared_ptr<const FileBytes>* out);
  static std::shared_ptr<const FileBytes> copy_of(const void* data, size_t size);

  FileBytes(const FileBytes&) = delete;
  FileBytes& operator=(const FileBytes&) = delete;
  ~FileBytes();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  FileBytes() = default;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  void* mapping_ = nullptr;  // munmap target, or nullptr for the copy
  std::vector<uint8_t> copy_;
};

// A file written atomically: open() creates a temporary file next to `path`,
// write() appends, commit() flushes, fsyncs, renames it over `path` and fsyncs
// the directory. Destroying an uncommitted AtomicFile removes the temporary.
class AtomicFile {
 public:
  AtomicFile() = default;
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();

  Status open(const std::string& path);
  Status write(const void* data, size_t size);
  Status commit();
  void abandon();  // removes the temporary; `path` is left as it was

  const std::string& path() const { return path_; }
  uint64_t bytes_written() const { return written_; }

 private:
  std::string path_, temp_path_;
  int fd_ = -1;
  uint64_t written_ = 0;
};

Status write_file_atomic(const std::string& path, const void* data, size_t size);
// Reads a whole (small) file; refuses files larger than max_bytes.
Status read_text_file(const std::string& path, uint64_t max_bytes, std::string* out);

// ---- GGUF ------------------------------------------------------------------

inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr int kGgufMaxArrayDepth = 8;  // nested arrays deeper than this are refused
inline constexpr int kGgufMaxDims = 4;        // GGML_MAX_DIMS

// Metadata value types, numbered as in the file.
enum class GgufType : uint32_t {
  kUint8 = 0, kInt8 = 1, kUint16 = 2, kInt16 = 3, kUint32 = 4, kInt32 = 5, kFloat32 = 6,
  kBool = 7, kString = 8, kArray = 9, kUint64 = 10, kInt64 = 11, kFloat64 = 12,
};
const char* gguf_type_name(GgufType t);
// Byte size of a fixed-size scalar type; 0 for string and array.
size_t gguf_scalar_size(GgufType t);

// One metadata value. Scalars live in the field matching their type; arrays
// keep numeric and bool elements as their little-endian file bytes (compact
// for 150k-entry token tables), strings and nested arrays as vectors.
struct GgufValue {
  GgufType type = GgufType::kUint8;
  uint64_t uint_value = 0;   // kUint8 .. kUint64, kBool (0 or 1)
  int64_t int_value = 0;     // kInt8 .. kInt64
  double float_value = 0.0;  // kFloat32 (exactly the stored float), kFloat64
  std::string string_value;  // kString

  GgufType array_type = GgufType::kUint8;  // kArray: element type
  uint64_t array_size = 0;                 // kArray: element count
  std::vector<uint8_t> array_bytes;        // numeric / bool elements
  std::vector<std::string> array_strings;  // string elements
  std::vector<GgufValue> array_arrays;     // nested arrays

  static GgufValue make_uint(GgufType t, uint64_t v);  // kUint8 .. kUint64
  static GgufValue make_int(GgufType t, int64_t v);    // kInt8 .. kInt64
  static GgufValue make_float(GgufType t, double v);   // kFloat32 / kFloat64
  static GgufValue make_bool(bool v);
  static GgufValue make_string(std::string v);
  // Numeric or bool elements (element type elem; values converted, floats to
  // float32 when elem is kFloat32).
  static GgufValue make_array(GgufType elem, const std::vector<double>& values);
  static GgufValue make_int_array(GgufType elem, const std::vector<int64_t>& values);
  static GgufValue make_string_array(std::vector<std::string> values);
  static GgufValue make_array_of_arrays(std::vector<GgufValue> arrays);  // each one a kArray

  // Scalar reads with conversion; false when the type does not fit or the
  // value does not fit the destination.
  bool get_uint(uint64_t* out) const;  // any integer type, value >= 0
  bool get_int(int64_t* out) const;    // any integer type, value <= INT64_MAX
  bool get_float(double* out) const;   // float or integer types
  bool get_bool(bool* out) const;      // kBool only
  // Element i of a numeric / bool array.
  bool array_get_float(uint64_t i, double* out) const;
  bool array_get_int(uint64_t i, int64_t* out) const;

  // Short human-readable rendering (arrays elided after max_elements).
  std::string to_string(size_t max_elements = 8) const;
};

// ggml tensor types. Named ones are what nvfp4moe reads; the others are known
// by size (so a file lists correctly) and refused on read.
inline constexpr uint32_t kGgmlF32 = 0;
inline constexpr uint32_t kGgmlF16 = 1;
inline constexpr uint32_t kGgmlF64 = 28;
inline constexpr uint32_t kGgmlBF16 = 30;
inline constexpr uint32_t kGgmlNvfp4 = 40;

struct GgmlTypeInfo {
  const char* name = nullptr;
  int64_t block_values = 0;  // values per block
  int64_t block_bytes = 0;   // bytes per block
};
// False for ids this build does not know (their size cannot be checked).
bool ggml_type_info(uint32_t type, GgmlTypeInfo* out);
// "NVFP4", or "type 77" for an unknown id.
std::string ggml_type_name(uint32_t type);

struct GgufTensorInfo {
  std::string name;
  uint32_t type = 0;        // ggml type id
  std::vector<int64_t> ne;  // ggml order, fastest first: ne[0] = row length (K)
  uint64_t offset = 0;      // from the start of the data section
  uint64_t nbytes = 0;      // 0 when size_known is false
  bool size_known = false;  // the type id is one ggml_type_info() knows

  int64_t num_elements() const;
  // ne reversed: the numpy / PyTorch shape, [E, N, K] for ne = [K, N, E].
  std::vector<int64_t> numpy_shape() const;
};

class GgufFile {
 public:
  // Memory-maps and parses `path`.
  static Status open(const std::string& path, GgufFile* out);
  // Parses bytes already in memory; `name` stands for the file in messages.
  static Status parse(std::shared_ptr<const FileBytes> bytes, const std::string& name, GgufFile* out);
  static Status parse(const void* data, size_t size, const std::string& name, GgufFile* out);

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the data section in the file
  uint64_t file_size() const { return bytes_ ? bytes_->size() : 0; }

  // Metadata in file order; keys are unique.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(std::string_view key) const;
  // Typed lookups. A missing key or a value of an unfitting type is an error
  // naming the key; use find() for optional keys.
  Status get_uint(std::string_view key, uint64_t* out) const;
  Status get_int(std::string_view key, int64_t* out) const;
  Status get_float(std::string_view key, double* out) const;
  Status get_bool(std::string_view key, bool* out) const;
  Status get_string(std::string_view key, std::string* out) const;
  // general.architecture, or "" when absent or not a string.
  std::string architecture() const;

  // Tensor infos in file order; names are unique; data ranges are inside the
  // file and do not overlap.
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;

  // Zero-copy view of a tensor's bytes. kUnsupported for unknown type ids.
  Status tensor_bytes(const GgufTensorInfo& t, const uint8_t** data, uint64_t* size) const;
  // F32 / F16 / BF16 / F64 converted to F32; NVFP4 dequantized exactly
  // (without the `.scale` tensor). Other types: kUnsupported. Values in ggml order
  // (= row-major numpy order).
  Status read_f32(const GgufTensorInfo& t, std::vector<float>* out) const;
  // NVFP4 tensor of ne = [K, N, E] (or [K, N]: E = 1) to the canonical
  // layout; alpha is left empty (meaning 1).
  Status read_nvfp4_experts(const GgufTensorInfo& t, ExpertWeights* out) const;

 private:
  std::shared_ptr<const FileBytes> bytes_;
  std::string name_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Writes GGUF v3. Metadata in insertion order (general.alignment first when
// not the default); tensors in insertion order, each at a multiple of the
// alignment. Tensor bytes are copied in.
class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = kGgufDefaultAlignment) : alignment_(alignment) {}

  // Adds or replaces a key.
  void set(const std::string& key, GgufValue value);
  // bytes must be exactly the size implied by type and ne (ggml order).
  Status add_tensor(const std::string& name, uint32_t type, const std::vector<int64_t>& ne,
                    std::vector<uint8_t> bytes);
  Status add_f32(const std::string& name, const std::vector<int64_t>& ne, const float* values);
  // Stores F16 / BF16 (round to nearest even) from F32 values.
  Status add_f16(const std::string& name, const std::vector<int64_t>& ne, const float* values);
  Status add_bf16(const std::string& name, const std::vector<int64_t>& ne, const float* values);
  // llama.cpp's form of NVFP4 experts: "<base>.weight" NVFP4 with
  // ne = [K, N, E] and, when w.alpha is set, "<base>.scale" F32 ne = [E].
  // base is e.g. "blk.0.ffn_gate_exps".
  Status add_nvfp4_experts(const std::string& base, const ExpertWeightsView& w);

  Status serialize(std::vector<uint8_t>* out) const;
  Status write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> bytes;
  };
  Status emit(AtomicFile* file, std::vector<uint8_t>* memory) const;
  uint32_t alignment_;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<Tensor> tensors_;
};

// ---- safetensors -------------------------------------------------------------

inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;  // as the reference implementation
inline constexpr int kJsonMaxDepth = 64;

enum class StDType : int32_t {
  kBool, kU8, kI8, kF8_E5M2, kF8_E4M3, kI16, kU16, kF16, kBF16, kI32, kU32, kF32, kF64, kI64, kU64,
};
const char* st_dtype_name(StDType t);  // "F8_E4M3"
bool st_dtype_from_name(std::string_view name, StDType* out);
size_t st_dtype_size(StDType t);

struct SafetensorsTensorInfo {
  std::string name;
  StDType dtype = StDType::kU8;
  std::vector<int64_t> shape;  // row-major, slowest first (numpy order)
  uint64_t begin = 0, end = 0;   // byte range in the data section
  int64_t num_elements() const;
};

class SafetensorsFile {
 public:
  static Status open(const std::string& path, SafetensorsFile* out);
  static Status parse(std::shared_ptr<const FileBytes> bytes, const std::string& name, SafetensorsFile* out);
  static Status parse(const void* data, size_t size, const std::string& name, SafetensorsFile* out);

  const std::string& name() const { return name_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }  // "__metadata__"
  const std::vector<SafetensorsTensorInfo>& tensors() const { return tensors_; }  // sorted by name
  const SafetensorsTensorInfo* find_tensor(std::string_view name) const;
  uint64_t data_offset() const { return data_offset_; }

  Status tensor_bytes(const SafetensorsTensorInfo& t, const uint8_t** data, uint64_t* size) const;
  // F32 / F16 / BF16 / F64 to F32. Others: kUnsupported.
  Status read_f32(const SafetensorsTensorInfo& t, std::vector<float>* out) const;

 private:
  std::shared_ptr<const FileBytes> bytes_;
  std::string name_;
  uint64_t data_offset_ = 0;
  std::map<std::string, std::string> metadata_;
  std::vector<SafetensorsTensorInfo> tensors_;
};

// What config.json / hf_quant_config.json say about the model (only what
// nvfp4moe uses; absent fields stay at their defaults).
struct CheckpointConfig {
  std::string quant_algo;     // "NVFP4", "FP8", ... ("" when not quantized)
  int64_t group_size = 0;     // weight quantization group (16 for NVFP4); 0 = not stated
  int64_t num_experts = 0;    // num_experts / num_local_experts / n_routed_experts
  int64_t top_k = 0;          // num_experts_per_tok
  bool norm_topk_prob = false;
  bool has_norm_topk_prob = false;
  std::string source;         // the file(s) it came from

  // The config declares ModelOpt-style NVFP4 (quant_algo NVFP4 and a group
  // size of 16 or none stated).
  bool is_nvfp4() const { return quant_algo == "NVFP4" && (group_size == 0 || group_size == kScaleBlock); }
};

// A checkpoint: one .safetensors file, or a sharded one described by
// model.safetensors.index.json (weight_map), plus its config files.
class SafetensorsCheckpoint {
 public:
  // path: a .safetensors file, an index .json, or a directory holding
  // model.safetensors.index.json or model.safetensors (or exactly one
  // *.safetensors file). config.json and hf_quant_config.json are read from
  // the same directory when present.
  static Status open(const std::string& path, SafetensorsCheckpoint* out);
  // A single already-parsed file (in-memory use, fuzzing); no config.
  static SafetensorsCheckpoint from_file(SafetensorsFile file);

  const std::string& name() const { return name_; }
  const CheckpointConfig& config() const { return config_; }
  std::vector<std::string> tensor_names() const;  // sorted
  // nullptr when absent.
  const SafetensorsTensorInfo* find(std::string_view name, const SafetensorsFile** file) const;

 private:
  std::string name_;
  CheckpointConfig config_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t, std::less<>> tensor_file_;  // name -> index into files_
};

// Parses config.json-like / hf_quant_config.json-like text into cfg (merging).
Status parse_checkpoint_config(std::string_view json_text, const std::string& name, CheckpointConfig* cfg);

// Writes one .safetensors file. Header keys sorted, header padded with spaces
// to a multiple of 8 bytes, data in insertion order.
class SafetensorsWriter {
 public:
  void set_metadata(const std::string& key, const std::string& value);
  Status add_tensor(const std::string& name, StDType dtype, const std::vector<int64_t>& shape,
                    std::vector<uint8_t> bytes);
  Status add_f32(const std::string& name, const std::vector<int64_t>& shape, const float* values);
  Status add_bf16(const std::string& name, const std::vector<int64_t>& shape, const float* values);
  // ModelOpt NVFP4 per-expert tensors "<experts_prefix>.<e>.<proj>.weight"
  // (U8 [N, K/2]), ".weight_scale" (F8_E4M3 [N, K/16]) and ".weight_scale_2"
  // (F32 [], = alpha[e], 1 when w.alpha is null). experts_prefix is e.g.
  // "model.layers.0.mlp.experts", proj "gate_proj".
  Status add_modelopt_experts(const std::string& experts_prefix, const std::string& proj,
                              const ExpertWeightsView& w);

  Status serialize(std::vector<uint8_t>* out) const;
  Status write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    StDType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  Status header_text(std::string* text) const;
  std::map<std::string, std::string> metadata_;
  std::vector<Tensor> tensors_;
  std::map<std::string, size_t> index_;
};

// hf_quant_config.json as ModelOpt writes it for NVFP4 (group_size 16).
std::string modelopt_nvfp4_quant_config_json();

// ---- .npy --------------------------------------------------------------------

enum class NpyDType : int32_t { kF32, kF64, kF16, kI8, kI16, kI32, kI64, kU8, kU16, kU32, kU64, kBool };
const char* npy_descr(NpyDType t);  // "<f4"
size_t npy_dtype_size(NpyDType t);

// A C-order (row-major), little-endian array. data holds the raw element
// bytes; use the typed copies to read them.
struct NpyArray {
  NpyDType dtype = NpyDType::kF32;
  std::vector<int64_t> shape;  // any rank; {} is a scalar
  std::vector<uint8_t> data;

  int64_t num_elements() const;
  static NpyArray from_f32(std::vector<int64_t> shape, const float* values);
  static NpyArray from_i32(std::vector<int64_t> shape, const int32_t* values);
  // Converting copies: to_f32 accepts every float and integer dtype (exact for
  // f4, f2, and integers up to 2^24); to_i32 every integer dtype whose values
  // fit, and refuses floats.
  Status to_f32(std::vector<float>* out) const;
  Status to_i32(std::vector<int32_t>* out) const;
};

// Versions 1.0, 2.0 and 3.0. fortran_order True and big-endian dtypes are
// refused with a clear message.
Status read_npy(const std::string& path, NpyArray* out);
Status parse_npy(const void* data, size_t size, const std::string& name, NpyArray* out);
// Version 1.0 (2.0 when the header needs it), written atomically.
Status serialize_npy(const NpyArray& a, std::vector<uint8_t>* out);
Status write_npy(const std::string& path, const NpyArray& a);

// ---- MoE layers ----------------------------------------------------------------

// One MoE FFN layer, assembled from a file into the canonical layout.
//
// GGUF (llama.cpp names, N = layer):
//   blk.N.ffn_gate_exps.weight, blk.N.ffn_up_exps.weight   ne [H, F, E]
//   or blk.N.ffn_gate_up_exps.weight (merged, gate rows first) ne [H, 2F, E]
//   blk.N.ffn_down_exps.weight                               ne [F, H, E]
//   <name without .weight>.scale        F32, E values (or 1, broadcast): alpha
//   <name without .weight>.input_scale  F32, E values (or 1): kept, not applied
//   blk.N.ffn_gate_inp.weight           router, ne [H, E], F32/F16/BF16
//   <arch>.expert_count, <arch>.expert_used_count, <arch>.expert_weights_norm,
//   <arch>.expert_weights_scale, <arch>.expert_gating_func, with
//   arch = general.architecture.
// safetensors (ModelOpt NVFP4), P = discovered prefix such as "model.":
//   P layers.N.mlp.experts.e.{gate,up,down}_proj.{weight U8 [N, K/2],
//   weight_scale F8_E4M3 [N, K/16], weight_scale_2 F32 [] or [1],
//   input_scale F32}, router P layers.N.mlp.gate.weight [E, H]. Mixtral-style
//   block_sparse_moe.experts.e.{w1,w3,w2} (gate, up, down) is accepted too.
//   alpha[e] = weight_scale_2 of that expert and projection, so gate and up
//   keep separate alpha vectors. top_k / norm from config.json.
struct MoeLayerFile {
  std::string source;  // file or directory it came from
  std::string format;  // "gguf" or "safetensors"
  int64_t layer = 0;
  int64_t num_experts = 0;  // E
  int64_t top_k = 0;        // k; 0 when the file does not say
  bool norm_topk = false;   // renormalise the k selected router weights to sum 1
  float weights_scale = 1.0f;  // <arch>.expert_weights_scale (GGUF), else 1
  int32_t gating_func = 0;  // llama.cpp expert_gating_func: 0 unset, 1 softmax, 2 sigmoid, ...
  int64_t hidden = 0;       // H
  int64_t ffn = 0;          // F (per expert)
  bool merged = false;      // gate_up holds [E][2F][H]; gate and up are empty
  ExpertWeights gate, up, gate_up, down;  // alpha always filled (E values)
  // Activation scales of W4A4 checkpoints; empty when absent. nvfp4moe runs
  // BF16 activations, so they are informational.
  std::vector<float> gate_input_scale, up_input_scale, gate_up_input_scale, down_input_scale;
  std::vector<float> router;  // [E][H] row-major; empty when absent

  MoeLayerWeights weights() const;  // views into this object
};

struct MoeLoadOptions {
  // Expert weights stored as F32/F16/BF16 are quantized with `quantize`
  // instead of being refused.
  bool quantize_dense = false;
  QuantizeOptions quantize;
  // safetensors: the tensor name prefix before "layers." ("model."); empty
  // means discover it (an error when several prefixes have that layer).
  std::string tensor_prefix;
};

// Dispatches on what path is: a GGUF file (by magic), a .safetensors file, an
// index .json or a directory.
Status load_moe_layer(const std::string& path, int64_t layer, MoeLayerFile* out, const MoeLoadOptions& opt = {});
Status load_moe_layer(const GgufFile& file, int64_t layer, MoeLayerFile* out, const MoeLoadOptions& opt = {});
Status load_moe_layer(const SafetensorsCheckpoint& ckpt, int64_t layer, MoeLayerFile* out,
                      const MoeLoadOptions& opt = {});
// Layers that have expert tensors, ascending.
Status list_moe_layers(const std::string& path, std::vector<int64_t>* layers);
std::vector<int64_t> list_moe_layers(const GgufFile& file);
std::vector<int64_t> list_moe_layers(const SafetensorsCheckpoint& ckpt);

}  // namespace nvfp4moe::io
