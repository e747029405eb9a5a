// safetensors reader, sharded checkpoints, config files, writer.
//
// File: u64 header length N, N bytes of JSON, then the data section. The
// JSON maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]}
// (offsets relative to the data section) and may hold "__metadata__", a map
// of strings.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <nlohmann/json.hpp>
#include <new>

#include "io/io_util.hpp"
#include "io/json_util.hpp"
#include "nvfp4moe/io.hpp"

namespace nvfp4moe::io {

using detail::checked_mul;
using detail::format_error;
using detail::quote_untrusted;
using json = nlohmann::json;

namespace {

struct DTypeEntry {
  StDType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {StDType::kBool, "BOOL", 1},   {StDType::kU8, "U8", 1},       {StDType::kI8, "I8", 1},
    {StDType::kF8_E5M2, "F8_E5M2", 1}, {StDType::kF8_E4M3, "F8_E4M3", 1}, {StDType::kI16, "I16", 2},
    {StDType::kU16, "U16", 2},     {StDType::kF16, "F16", 2},     {StDType::kBF16, "BF16", 2},
    {StDType::kI32, "I32", 4},     {StDType::kU32, "U32", 4},     {StDType::kF32, "F32", 4},
    {StDType::kF64, "F64", 8},     {StDType::kI64, "I64", 8},     {StDType::kU64, "U64", 8},
};

bool is_dir(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}
bool is_file(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}
std::string dir_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}
bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A dimension or offset from JSON: a non-negative integer.
bool json_uint(const json& j, uint64_t* out) {
  if (j.is_number_unsigned()) {
    *out = j.get<uint64_t>();
    return true;
  }
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    *out = static_cast<uint64_t>(v);
    return true;
  }
  return false;
}

Status parse_header_json(const std::string& name, const char* text, size_t size, uint64_t data_size,
                         std::map<std::string, std::string>* metadata, std::vector<SafetensorsTensorInfo>* tensors) {
  json header;
  NVFP4MOE_RETURN_IF_ERROR(detail::parse_json(std::string_view(text, size), name + " header", &header));
  if (!header.is_object()) return format_error(name, "header JSON is not an object");
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const json& value = it.value();
    if (key == "__metadata__") {
      if (!value.is_object()) return format_error(name, "__metadata__ is not an object");
      for (auto m = value.begin(); m != value.end(); ++m) {
        if (!m.value().is_string()) {
          return format_error(name, "__metadata__ value of ", quote_untrusted(m.key()), " is not a string");
        }
        (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    auto fail = [&](const auto&... args) { return format_error(name, "tensor ", quote_untrusted(key), ": ", args...); };
    if (!value.is_object()) return fail("entry is not an object");
    SafetensorsTensorInfo t;
    t.name = key;
    const auto dtype = value.find("dtype");
    if (dtype == value.end() || !dtype->is_string()) return fail("\"dtype\" is missing or not a string");
    if (!st_dtype_from_name(dtype->get_ref<const std::string&>(), &t.dtype)) {
      return make_status(StatusCode::kUnsupported, name, ": tensor ", quote_untrusted(key), ": dtype ",
                         quote_untrusted(dtype->get_ref<const std::string&>()), " is not supported");
    }
    const auto shape = value.find("shape");
    if (shape == value.end() || !shape->is_array()) return fail("\"shape\" is missing or not an array");
    if (shape->size() > 64) return fail("shape has ", shape->size(), " dimensions");
    for (size_t d = 0; d < shape->size(); ++d) {
      uint64_t dim;
      if (!json_uint((*shape)[d], &dim) || dim > static_cast<uint64_t>(INT64_MAX)) {
        return fail("shape[", d, "] = ", (*shape)[d].dump(), " is not a non-negative integer");
      }
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    const auto offsets = value.find("data_offsets");
    if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2) {
      return fail("\"data_offsets\" is missing or not [begin, end]");
    }
    if (!json_uint((*offsets)[0], &t.begin) || !json_uint((*offsets)[1], &t.end)) {
      return fail("data_offsets ", offsets->dump(), " are not non-negative integers");
    }
    if (t.begin > t.end) return fail("data_offsets [", t.begin, ", ", t.end, "] end before they begin");
    if (t.end > data_size) {
      return fail("data_offsets [", t.begin, ", ", t.end, "] end past the data section (", data_size, " bytes)");
    }
    int64_t n;
    uint64_t want;
    if (!detail::checked_num_elements(t.shape, &n) ||
        !checked_mul(static_cast<uint64_t>(n), st_dtype_size(t.dtype), &want)) {
      return fail("element count of shape overflows");
    }
    if (t.end - t.begin != want) {
      return fail("data_offsets [", t.begin, ", ", t.end, "] hold ", t.end - t.begin, " bytes but ",
                  st_dtype_name(t.dtype), " of this shape takes ", want);
    }
    tensors->push_back(std::move(t));
  }
  // Non-empty ranges must not overlap. Sorted by begin, each one has to start
  // at or after the furthest end seen so far.
  std::sort(tensors->begin(), tensors->end(),
            [](const SafetensorsTensorInfo& a, const SafetensorsTensorInfo& b) { return a.begin < b.begin; });
  const SafetensorsTensorInfo* furthest = nullptr;
  for (const auto& t : *tensors) {
    if (t.end == t.begin) continue;
    if (furthest && t.begin < furthest->end) {
      return format_error(name, "tensors ", quote_untrusted(furthest->name), " [", furthest->begin, ", ", furthest->end,
                          ") and ", quote_untrusted(t.name), " [", t.begin, ", ", t.end, ") overlap");
    }
    if (!furthest || t.end > furthest->end) furthest = &t;
  }
  std::sort(tensors->begin(), tensors->end(),
            [](const SafetensorsTensorInfo& a, const SafetensorsTensorInfo& b) { return a.name < b.name; });
  return ok_status();
}

}  // namespace

const char* st_dtype_name(StDType t) {
  for (const auto& e : kDTypes) {
    if (e.dtype == t) return e.name;
  }
  return "invalid";
}
bool st_dtype_from_name(std::string_view name, StDType* out) {
  for (const auto& e : kDTypes) {
    if (name == e.name) {
      *out = e.dtype;
      return true;
    }
  }
  return false;
}
size_t st_dtype_size(StDType t) {
  for (const auto& e : kDTypes) {
    if (e.dtype == t) return e.size;
  }
  return 0;
}

int64_t SafetensorsTensorInfo::num_elements() const {
  int64_t n = 0;
  return detail::checked_num_elements(shape, &n) ? n : -1;
}

// ---- SafetensorsFile -----------------------------------------------------------

Status SafetensorsFile::open(const std::string& path, SafetensorsFile* out) {
  std::shared_ptr<const FileBytes> bytes;
  NVFP4MOE_RETURN_IF_ERROR(FileBytes::map(path, &bytes));
  return parse(std::move(bytes), path, out);
}

Status SafetensorsFile::parse(const void* data, size_t size, const std::string& name, SafetensorsFile* out) {
  try {
    return parse(FileBytes::copy_of(data, size), name, out);
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, name, ": out of memory copying ", size, " bytes");
  }
}

Status SafetensorsFile::parse(std::shared_ptr<const FileBytes> bytes, const std::string& name, SafetensorsFile* out) {
  if (!bytes) return invalid_argument("SafetensorsFile::parse: bytes is null");
  detail::Cursor c(bytes->data(), bytes->size());
  uint64_t header_len;
  if (!c.read(&header_len)) {
    return format_error(name, "file is ", bytes->size(), " bytes, too short for the 8-byte header length");
  }
  if (header_len > kSafetensorsMaxHeaderBytes) {
    return format_error(name, "header length ", header_len, " exceeds the limit of ", kSafetensorsMaxHeaderBytes,
                        " bytes");
  }
  if (header_len > c.remaining()) {
    return format_error(name, "header length ", header_len, " runs past the end of the file (", c.remaining(),
                        " bytes follow the length)");
  }
  const uint8_t* header = nullptr;
  (void)c.take(header_len, &header);
  if (header_len == 0 || header[0] != '{') return format_error(name, "header does not start with '{'");
  SafetensorsFile f;
  f.name_ = name;
  f.data_offset_ = 8 + header_len;
  try {
    NVFP4MOE_RETURN_IF_ERROR(parse_header_json(name, reinterpret_cast<const char*>(header),
                                               static_cast<size_t>(header_len), c.remaining(), &f.metadata_,
                                               &f.tensors_));
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, name, ": out of memory parsing the header");
  } catch (const std::exception& e) {
    return format_error(name, "header: ", e.what());
  }
  f.bytes_ = std::move(bytes);
  *out = std::move(f);
  return ok_status();
}

const SafetensorsTensorInfo* SafetensorsFile::find_tensor(std::string_view name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const SafetensorsTensorInfo& t, std::string_view n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

Status SafetensorsFile::tensor_bytes(const SafetensorsTensorInfo& t, const uint8_t** data, uint64_t* size) const {
  if (!bytes_) return invalid_argument("SafetensorsFile::tensor_bytes: no file is open");
  uint64_t begin, end;
  if (t.begin > t.end || !detail::checked_add(data_offset_, t.begin, &begin) ||
      !detail::checked_add(data_offset_, t.end, &end) || end > bytes_->size()) {
    return invalid_argument(name_, ": tensor ", quote_untrusted(t.name), " [", t.begin, ", ", t.end,
                            ") is not inside this file's data section");
  }
  *data = bytes_->data() + begin;
  *size = end - begin;
  return ok_status();
}

Status SafetensorsFile::read_f32(const SafetensorsTensorInfo& t, std::vector<float>* out) const {
  const uint8_t* data;
  uint64_t size;
  NVFP4MOE_RETURN_IF_ERROR(tensor_bytes(t, &data, &size));
  detail::FloatKind kind;
  switch (t.dtype) {
    case StDType::kF32: kind = detail::FloatKind::kF32; break;
    case StDType::kF16: kind = detail::FloatKind::kF16; break;
    case StDType::kBF16: kind = detail::FloatKind::kBF16; break;
    case StDType::kF64: kind = detail::FloatKind::kF64; break;
    default:
      return make_status(StatusCode::kUnsupported, name_, ": tensor ", quote_untrusted(t.name), " has dtype ",
                         st_dtype_name(t.dtype), "; only F32, F16, BF16 and F64 convert to F32");
  }
  const size_t n = static_cast<size_t>(size / st_dtype_size(t.dtype));
  try {
    out->resize(n);
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, name_, ": out of memory reading tensor ", quote_untrusted(t.name));
  }
  detail::convert_to_f32(kind, data, n, out->data());
  return ok_status();
}

// ---- config files -----------------------------------------------------------

Status parse_checkpoint_config(std::string_view json_text, const std::string& name, CheckpointConfig* cfg) {
  try {
    json j;
    NVFP4MOE_RETURN_IF_ERROR(detail::parse_json(json_text, name, &j));
    if (!j.is_object()) return format_error(name, "is not a JSON object");
    if (!cfg->source.empty()) cfg->source += ", ";
    cfg->source += name;
    auto get_int = [&](const json& obj, const char* key, int64_t* out) -> Status {
      auto it = obj.find(key);
      if (it == obj.end() || it->is_null()) return ok_status();
      uint64_t v;
      if (!json_uint(*it, &v) || v > static_cast<uint64_t>(INT32_MAX)) {
        return format_error(name, "\"", key, "\" = ", it->dump(), " is not a non-negative integer");
      }
      *out = static_cast<int64_t>(v);
      return ok_status();
    };
    // The quantization block: hf_quant_config.json's "quantization", or
    // config.json's "quantization_config".
    const json* quant = nullptr;
    if (auto it = j.find("quantization"); it != j.end() && it->is_object()) quant = &*it;
    if (auto it = j.find("quantization_config"); it != j.end() && it->is_object()) quant = &*it;
    if (quant) {
      if (auto it = quant->find("quant_algo"); it != quant->end()) {
        if (it->is_string()) {
          cfg->quant_algo = it->get<std::string>();
          std::transform(cfg->quant_algo.begin(), cfg->quant_algo.end(), cfg->quant_algo.begin(),
                         [](unsigned char ch) { return static_cast<char>(std::toupper(ch)); });
        } else if (!it->is_null()) {
          return format_error(name, "quant_algo = ", it->dump(), " is not a string");
        }
      }
      NVFP4MOE_RETURN_IF_ERROR(get_int(*quant, "group_size", &cfg->group_size));
      // compressed-tensors style: config_groups.<g>.weights.group_size.
      if (auto groups = quant->find("config_groups"); groups != quant->end() && groups->is_object()) {
        for (auto g = groups->begin(); g != groups->end(); ++g) {
          if (!g.value().is_object()) continue;
          auto w = g.value().find("weights");
          if (w != g.value().end() && w->is_object()) NVFP4MOE_RETURN_IF_ERROR(get_int(*w, "group_size", &cfg->group_size));
        }
      }
    }
    // The model block may be nested (multimodal configs keep it in text_config).
    const json* model = &j;
    if (auto it = j.find("text_config"); it != j.end() && it->is_object()) model = &*it;
    for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts"}) {
      NVFP4MOE_RETURN_IF_ERROR(get_int(*model, key, &cfg->num_experts));
    }
    NVFP4MOE_RETURN_IF_ERROR(get_int(*model, "num_experts_per_tok", &cfg->top_k));
    if (auto it = model->find("norm_topk_prob"); it != model->end() && !it->is_null()) {
      if (!it->is_boolean()) return format_error(name, "norm_topk_prob = ", it->dump(), " is not a bool");
      cfg->norm_topk_prob = it->get<bool>();
      cfg->has_norm_topk_prob = true;
    }
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, name, ": out of memory");
  } catch (const std::exception& e) {
    return format_error(name, e.what());
  }
  return ok_status();
}

// ---- SafetensorsCheckpoint ------------------------------------------------------

SafetensorsCheckpoint SafetensorsCheckpoint::from_file(SafetensorsFile file) {
  SafetensorsCheckpoint c;
  c.name_ = file.name();
  for (const auto& t : file.tensors()) c.tensor_file_.emplace(t.name, 0);
  c.files_.push_back(std::move(file));
  return c;
}

namespace {

// A shard name from an index: a plain file name in the index's directory.
bool is_safe_shard_name(const std::string& s) {
  return !s.empty() && s.size() < 4096 && s.find('/') == std::string::npos && s.find('\\') == std::string::npos &&
         s != "." && s != ".." && s.find('\0') == std::string::npos;
}

Status read_configs(const std::string& dir, CheckpointConfig* cfg) {
  for (const char* file : {"config.json", "hf_quant_config.json"}) {
    const std::string path = dir + "/" + file;
    if (!is_file(path)) continue;
    std::string text;
    NVFP4MOE_RETURN_IF_ERROR(read_text_file(path, 64u << 20, &text));
    NVFP4MOE_RETURN_IF_ERROR(parse_checkpoint_config(text, path, cfg));
  }
  return ok_status();
}

}  // namespace

Status SafetensorsCheckpoint::open(const std::string& path, SafetensorsCheckpoint* out) {
  SafetensorsCheckpoint c;
  c.name_ = path;
  std::string dir, index_path, single_path;
  if (is_dir(path)) {
    dir = path;
    if (is_file(dir + "/model.safetensors.index.json")) {
      index_path = dir + "/model.safetensors.index.json";
    } else if (is_file(dir + "/model.safetensors")) {
      single_path = dir + "/model.safetensors";
    } else {
      std::vector<std::string> found;
      if (DIR* d = ::opendir(dir.c_str())) {
        while (const dirent* e = ::readdir(d)) {
          const std::string n = e->d_name;
          if (ends_with(n, ".safetensors.index.json")) found.insert(found.begin(), n);
          else if (ends_with(n, ".safetensors")) found.push_back(n);
        }
        ::closedir(d);
      }
      if (!found.empty() && ends_with(found.front(), ".index.json")) {
        index_path = dir + "/" + found.front();
      } else if (found.size() == 1) {
        single_path = dir + "/" + found.front();
      } else {
        return make_status(StatusCode::kInvalidArgument, path, ": directory holds ", found.size(),
                           " .safetensors files and no model.safetensors.index.json");
      }
    }
  } else if (ends_with(path, ".json")) {
    dir = dir_of(path);
    index_path = path;
  } else {
    dir = dir_of(path);
    single_path = path;
  }
  NVFP4MOE_RETURN_IF_ERROR(read_configs(dir, &c.config_));

  try {
    if (!single_path.empty()) {
      SafetensorsFile f;
      NVFP4MOE_RETURN_IF_ERROR(SafetensorsFile::open(single_path, &f));
      for (const auto& t : f.tensors()) c.tensor_file_.emplace(t.name, 0);
      c.files_.push_back(std::move(f));
    } else {
      std::string text;
      NVFP4MOE_RETURN_IF_ERROR(read_text_file(index_path, 256u << 20, &text));
      json index;
      NVFP4MOE_RETURN_IF_ERROR(detail::parse_json(text, index_path, &index));
      if (!index.is_object()) return format_error(index_path, "is not a JSON object");
      auto map = index.find("weight_map");
      if (map == index.end() || !map->is_object()) return format_error(index_path, "has no \"weight_map\" object");
      std::map<std::string, size_t> shard_of_file;
      for (auto it = map->begin(); it != map->end(); ++it) {
        if (!it.value().is_string()) {
          return format_error(index_path, "weight_map[", quote_untrusted(it.key()), "] is not a string");
        }
        const std::string& shard = it.value().get_ref<const std::string&>();
        if (!is_safe_shard_name(shard)) {
          return format_error(index_path, "weight_map[", quote_untrusted(it.key()), "] = ", quote_untrusted(shard),
                              " is not a file name in the index's directory");
        }
        auto s = shard_of_file.find(shard);
        if (s == shard_of_file.end()) {
          SafetensorsFile f;
          NVFP4MOE_RETURN_IF_ERROR(SafetensorsFile::open(dir + "/" + shard, &f));
          s = shard_of_file.emplace(shard, c.files_.size()).first;
          c.files_.push_back(std::move(f));
        }
        if (!c.files_[s->second].find_tensor(it.key())) {
          return format_error(index_path, "weight_map says tensor ", quote_untrusted(it.key()), " is in ", quote_untrusted(shard),
                              ", which does not hold it");
        }
        c.tensor_file_.emplace(it.key(), s->second);
      }
    }
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, path, ": out of memory opening the checkpoint");
  } catch (const std::exception& e) {
    return format_error(path, e.what());
  }
  *out = std::move(c);
  return ok_status();
}

std::vector<std::string> SafetensorsCheckpoint::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(tensor_file_.size());
  for (const auto& kv : tensor_file_) names.push_back(kv.first);
  return names;
}

const SafetensorsTensorInfo* SafetensorsCheckpoint::find(std::string_view name, const SafetensorsFile** file) const {
  auto it = tensor_file_.find(name);
  if (it == tensor_file_.end()) return nullptr;
  const SafetensorsFile& f = files_[it->second];
  if (file) *file = &f;
  return f.find_tensor(name);
}

// ---- SafetensorsWriter ----------------------------------------------------------

void SafetensorsWriter::set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }

Status SafetensorsWriter::add_tensor(const std::string& name, StDType dtype, const std::vector<int64_t>& shape,
                                     std::vector<uint8_t> bytes) {
  if (name.empty() || name == "__metadata__") return invalid_argument("safetensors tensor name ", quote_untrusted(name));
  if (index_.count(name)) return invalid_argument("safetensors tensor ", quote_untrusted(name), " was added twice");
  int64_t n;
  uint64_t want;
  if (!detail::checked_num_elements(shape, &n) ||
      !checked_mul(static_cast<uint64_t>(n), st_dtype_size(dtype), &want)) {
    return invalid_argument("safetensors tensor ", quote_untrusted(name), ": bad shape");
  }
  if (st_dtype_size(dtype) == 0) return invalid_argument("safetensors tensor ", quote_untrusted(name), ": bad dtype");
  if (bytes.size() != want) {
    return invalid_argument("safetensors tensor ", quote_untrusted(name), ": ", bytes.size(), " bytes given, ",
                            st_dtype_name(dtype), " of this shape takes ", want);
  }
  index_.emplace(name, tensors_.size());
  tensors_.push_back(Tensor{name, dtype, shape, std::move(bytes)});
  return ok_status();
}

Status SafetensorsWriter::add_f32(const std::string& name, const std::vector<int64_t>& shape, const float* values) {
  int64_t n;
  if (!detail::checked_num_elements(shape, &n)) return invalid_argument("safetensors tensor ", quote_untrusted(name), ": bad shape");
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * 4);
  if (n) std::memcpy(bytes.data(), values, bytes.size());
  return add_tensor(name, StDType::kF32, shape, std::move(bytes));
}

Status SafetensorsWriter::add_bf16(const std::string& name, const std::vector<int64_t>& shape, const float* values) {
  int64_t n;
  if (!detail::checked_num_elements(shape, &n)) return invalid_argument("safetensors tensor ", quote_untrusted(name), ": bad shape");
  std::vector<uint8_t> bytes;
  bytes.reserve(static_cast<size_t>(n) * 2);
  for (int64_t i = 0; i < n; ++i) detail::append_le<uint16_t>(&bytes, float_to_bf16(values[i]));
  return add_tensor(name, StDType::kBF16, shape, std::move(bytes));
}

Status SafetensorsWriter::add_modelopt_experts(const std::string& experts_prefix, const std::string& proj,
                                               const ExpertWeightsView& w) {
  if (w.num_experts <= 0 || w.rows <= 0 || w.cols <= 0 || w.cols % kScaleBlock != 0) {
    return invalid_argument("ModelOpt experts ", quote_untrusted(experts_prefix), ".", proj, ": shape [E=", w.num_experts,
                            ", N=", w.rows, ", K=", w.cols, "] needs positive sizes and K % 16 == 0");
  }
  if (!w.codes || !w.scales) return invalid_argument("ModelOpt experts ", quote_untrusted(proj), ": codes or scales is null");
  try {
    for (int64_t e = 0; e < w.num_experts; ++e) {
      const std::string base = experts_prefix + "." + std::to_string(e) + "." + proj;
      const uint8_t* codes = w.codes + e * w.expert_code_bytes();
      const uint8_t* scales = w.scales + e * w.expert_scale_bytes();
      NVFP4MOE_RETURN_IF_ERROR(add_tensor(base + ".weight", StDType::kU8, {w.rows, w.cols / 2},
                                          std::vector<uint8_t>(codes, codes + w.expert_code_bytes())));
      NVFP4MOE_RETURN_IF_ERROR(add_tensor(base + ".weight_scale", StDType::kF8_E4M3, {w.rows, w.cols / kScaleBlock},
                                          std::vector<uint8_t>(scales, scales + w.expert_scale_bytes())));
      const float alpha = w.alpha_of(e);
      NVFP4MOE_RETURN_IF_ERROR(add_f32(base + ".weight_scale_2", {}, &alpha));
    }
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, "ModelOpt experts ", quote_untrusted(experts_prefix), ": out of memory");
  }
  return ok_status();
}

Status SafetensorsWriter::header_text(std::string* text) const {
  try {
    json header = json::object();
    if (!metadata_.empty()) header["__metadata__"] = metadata_;
    uint64_t offset = 0;
    for (const Tensor& t : tensors_) {
      header[t.name] = {{"dtype", st_dtype_name(t.dtype)},
                        {"shape", t.shape},
                        {"data_offsets", {offset, offset + t.bytes.size()}}};
      offset += t.bytes.size();
    }
    *text = header.dump();
    // Pad so the data section starts 8-byte aligned, as the reference writer does.
    while ((8 + text->size()) % 8 != 0) text->push_back(' ');
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, "SafetensorsWriter: out of memory");
  } catch (const std::exception& e) {
    // json::dump throws on invalid UTF-8 in a name.
    return invalid_argument("SafetensorsWriter: ", e.what());
  }
  return ok_status();
}

Status SafetensorsWriter::serialize(std::vector<uint8_t>* out) const {
  std::string text;
  NVFP4MOE_RETURN_IF_ERROR(header_text(&text));
  try {
    out->clear();
    detail::append_le<uint64_t>(out, text.size());
    detail::append_bytes(out, text.data(), text.size());
    for (const Tensor& t : tensors_) detail::append_bytes(out, t.bytes.data(), t.bytes.size());
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, "SafetensorsWriter: out of memory");
  }
  return ok_status();
}

Status SafetensorsWriter::write(const std::string& path) const {
  std::string text;
  NVFP4MOE_RETURN_IF_ERROR(header_text(&text));
  AtomicFile file;
  NVFP4MOE_RETURN_IF_ERROR(file.open(path));
  const uint64_t len = text.size();
  NVFP4MOE_RETURN_IF_ERROR(file.write(&len, sizeof(len)));
  NVFP4MOE_RETURN_IF_ERROR(file.write(text.data(), text.size()));
  for (const Tensor& t : tensors_) NVFP4MOE_RETURN_IF_ERROR(file.write(t.bytes.data(), t.bytes.size()));
  return file.commit();
}

std::string modelopt_nvfp4_quant_config_json() {
  return R"({
  "producer": {"name": "modelopt", "version": "nvfp4moe"},
  "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": null, "group_size": 16, "exclude_modules": ["lm_head"]}
}
)";
}

}  // namespace nvfp4moe::io
