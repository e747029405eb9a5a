// GGUF reader: header, metadata, tensor infos, data section.
//
// Layout (little-endian): "GGUF", u32 version, u64 n_tensors, u64 n_kv, then
// n_kv (string key, u32 type, value), then n_tensors (string name, u32 n_dims,
// i64 ne[n_dims], u32 type, u64 offset), then padding to general.alignment,
// then the data section. Strings are u64 length + bytes. Versions 2 and 3
// share this layout (3 only added big-endian files, which are refused here).
#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <sstream>

#include "io/io_util.hpp"
#include "nvfp4moe/io.hpp"
#include "nvfp4moe/layout.hpp"

namespace nvfp4moe::io {

using detail::checked_add;
using detail::checked_align_up;
using detail::checked_mul;
using detail::Cursor;
using detail::format_error;
using detail::quote_untrusted;

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read little-endian
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;  // empty key, type, smallest value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;
// An array element of a nested array takes at least its type and count.
constexpr uint64_t kMinArrayBytes = 4 + 8;

bool is_valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::kFloat64); }

bool is_integer_type(GgufType t) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kUint16: case GgufType::kInt16:
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kUint64: case GgufType::kInt64:
      return true;
    default:
      return false;
  }
}
bool is_signed_type(GgufType t) {
  return t == GgufType::kInt8 || t == GgufType::kInt16 || t == GgufType::kInt32 || t == GgufType::kInt64;
}

// Element of a numeric array at p (its type t), as int64/uint64/double.
int64_t load_signed(GgufType t, const uint8_t* p) {
  switch (t) {
    case GgufType::kInt8: return detail::load_le<int8_t>(p);
    case GgufType::kInt16: return detail::load_le<int16_t>(p);
    case GgufType::kInt32: return detail::load_le<int32_t>(p);
    default: return detail::load_le<int64_t>(p);
  }
}
uint64_t load_unsigned(GgufType t, const uint8_t* p) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kBool: return detail::load_le<uint8_t>(p);
    case GgufType::kUint16: return detail::load_le<uint16_t>(p);
    case GgufType::kUint32: return detail::load_le<uint32_t>(p);
    default: return detail::load_le<uint64_t>(p);
  }
}

// What a failing read was about, rendered only when an error is reported.
struct Where {
  const std::string& file;
  const std::string& key;  // metadata key or tensor name being read
  const char* section;     // "metadata key" or "tensor"
  uint64_t index;
};

Status truncated(const Where& w, const Cursor& c, const char* field, uint64_t need) {
  return format_error(w.file, w.section, " #", w.index, w.key.empty() ? "" : " ", w.key.empty() ? "" : quote_untrusted(w.key),
                      ": ", field, " needs ", need, " bytes at offset ", c.pos(), " but only ", c.remaining(),
                      " remain (file size ", c.size(), ")");
}

Status read_string(Cursor& c, const Where& w, const char* field, std::string* out) {
  uint64_t len;
  if (!c.read(&len)) return truncated(w, c, field, 8);
  const uint8_t* p = nullptr;
  if (len > c.remaining()) {
    return format_error(w.file, w.section, " #", w.index, w.key.empty() ? "" : " ", w.key.empty() ? "" : quote_untrusted(w.key),
                        ": ", field, " length ", len, " at offset ", c.pos() - 8, " runs past the end of the file (",
                        c.remaining(), " bytes remain)");
  }
  (void)c.take(len, &p);
  out->assign(reinterpret_cast<const char*>(p), static_cast<size_t>(len));
  return ok_status();
}

Status read_value(Cursor& c, const Where& w, GgufType type, int depth, GgufValue* v);

Status read_array(Cursor& c, const Where& w, int depth, GgufValue* v) {
  uint32_t elem_raw;
  if (!c.read(&elem_raw)) return truncated(w, c, "array element type", 4);
  if (!is_valid_type(elem_raw)) {
    return format_error(w.file, "metadata key ", quote_untrusted(w.key), ": array element type ", elem_raw,
                        " is not a GGUF value type (0..12)");
  }
  const auto elem = static_cast<GgufType>(elem_raw);
  uint64_t count;
  if (!c.read(&count)) return truncated(w, c, "array length", 8);
  if (elem == GgufType::kArray && depth + 1 >= kGgufMaxArrayDepth) {
    return format_error(w.file, "metadata key ", quote_untrusted(w.key), ": arrays nested deeper than ", kGgufMaxArrayDepth,
                        " levels");
  }
  // Every element takes at least min_bytes, so a count larger than the rest of
  // the file can hold is rejected before anything is allocated.
  const uint64_t min_bytes = elem == GgufType::kString  ? 8
                             : elem == GgufType::kArray ? kMinArrayBytes
                                                        : gguf_scalar_size(elem);
  if (count > c.remaining() / min_bytes) {
    return format_error(w.file, "metadata key ", quote_untrusted(w.key), ": array of ", count, " ", gguf_type_name(elem),
                        " elements at offset ", c.pos() - 12, " needs at least ", min_bytes, " bytes each but only ",
                        c.remaining(), " bytes remain");
  }
  v->type = GgufType::kArray;
  v->array_type = elem;
  v->array_size = count;
  if (elem == GgufType::kString) {
    v->array_strings.resize(static_cast<size_t>(count));
    for (uint64_t i = 0; i < count; ++i) {
      NVFP4MOE_RETURN_IF_ERROR(read_string(c, w, "array string element", &v->array_strings[i]));
    }
  } else if (elem == GgufType::kArray) {
    v->array_arrays.resize(static_cast<size_t>(count));
    for (uint64_t i = 0; i < count; ++i) {
      NVFP4MOE_RETURN_IF_ERROR(read_value(c, w, GgufType::kArray, depth + 1, &v->array_arrays[i]));
    }
  } else {
    const uint8_t* p = nullptr;
    (void)c.take(count * min_bytes, &p);  // checked above
    if (elem == GgufType::kBool) {
      for (uint64_t i = 0; i < count; ++i) {
        if (p[i] > 1) {
          return format_error(w.file, "metadata key ", quote_untrusted(w.key), ": bool array element ", i, " is ",
                              static_cast<int>(p[i]), ", not 0 or 1");
        }
      }
    }
    v->array_bytes.assign(p, p + count * min_bytes);
  }
  return ok_status();
}

Status read_value(Cursor& c, const Where& w, GgufType type, int depth, GgufValue* v) {
  v->type = type;
  switch (type) {
    case GgufType::kString:
      return read_string(c, w, "string value", &v->string_value);
    case GgufType::kArray:
      return read_array(c, w, depth, v);
    case GgufType::kFloat32: {
      float f;
      if (!c.read(&f)) return truncated(w, c, "float32 value", 4);
      v->float_value = f;
      return ok_status();
    }
    case GgufType::kFloat64: {
      double f;
      if (!c.read(&f)) return truncated(w, c, "float64 value", 8);
      v->float_value = f;
      return ok_status();
    }
    default:
      break;
  }
  const size_t size = gguf_scalar_size(type);
  const uint8_t* p = nullptr;
  if (!c.take(size, &p)) return truncated(w, c, "value", size);
  if (is_signed_type(type)) {
    v->int_value = load_signed(type, p);
  } else {
    v->uint_value = load_unsigned(type, p);
    if (type == GgufType::kBool && v->uint_value > 1) {
      return format_error(w.file, "metadata key ", quote_untrusted(w.key), ": bool value is ", v->uint_value, ", not 0 or 1");
    }
  }
  return ok_status();
}

// Byte size of a tensor of this type and shape. Fails (with a reason) when
// the type is unknown, ne[0] does not hold whole blocks, or the size
// overflows.
bool tensor_byte_size(uint32_t type, const std::vector<int64_t>& ne, uint64_t* nbytes, std::string* why) {
  int64_t num_elements;
  if (!detail::checked_num_elements(ne, &num_elements)) {
    *why = "element count is negative or overflows int64";
    return false;
  }
  GgmlTypeInfo info;
  if (!ggml_type_info(type, &info)) {
    *why = "ggml " + ggml_type_name(type) + " has no known size";
    return false;
  }
  const int64_t row = ne.empty() ? 1 : ne[0];
  if (row % info.block_values != 0) {
    *why = "ne[0] = " + std::to_string(row) + " is not a multiple of " + info.name + "'s block of " +
           std::to_string(info.block_values) + " values";
    return false;
  }
  if (!checked_mul(static_cast<uint64_t>(num_elements / info.block_values), static_cast<uint64_t>(info.block_bytes),
                   nbytes)) {
    *why = "byte size overflows";
    return false;
  }
  return true;
}

struct ParsedHeader {
  uint32_t version = 0;
  uint64_t alignment = kGgufDefaultAlignment;
  uint64_t data_offset = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata;
  std::map<std::string, size_t, std::less<>> metadata_index;
  std::vector<GgufTensorInfo> tensors;
  std::map<std::string, size_t, std::less<>> tensor_index;
};

Status parse_header(const FileBytes* bytes, const std::string& name, ParsedHeader* h) {
  uint32_t* version = &h->version;
  uint64_t* alignment = &h->alignment;
  uint64_t* data_offset = &h->data_offset;
  auto* metadata = &h->metadata;
  auto* metadata_index = &h->metadata_index;
  auto* tensors = &h->tensors;
  auto* tensor_index = &h->tensor_index;
  Cursor c(bytes->data(), bytes->size());
  const std::string no_key;
  const Where header{name, no_key, "header", 0};
  uint32_t magic;
  if (!c.read(&magic)) return format_error(name, "file is ", bytes->size(), " bytes, too short for the GGUF magic");
  if (magic != kGgufMagic) {
    return format_error(name, "bad magic 0x", std::hex, magic, std::dec, " (expected \"GGUF\"); not a GGUF file");
  }
  if (!c.read(version)) return truncated(header, c, "version", 4);
  if (*version != 2 && *version != 3) {
    if (*version == 1) return format_error(name, "GGUF version 1 is not supported (only 2 and 3)");
    if ((*version & 0xFFFF) == 0) {
      return format_error(name, "GGUF version ", *version, " is not supported (a big-endian file? only little-endian "
                          "versions 2 and 3 are)");
    }
    return format_error(name, "GGUF version ", *version, " is not supported (only 2 and 3)");
  }
  uint64_t n_tensors, n_kv;
  if (!c.read(&n_tensors)) return truncated(header, c, "tensor count", 8);
  if (!c.read(&n_kv)) return truncated(header, c, "metadata count", 8);
  if (n_kv > c.remaining() / kMinKvBytes) {
    return format_error(name, "metadata count ", n_kv, " cannot fit in the ", c.remaining(), " bytes that remain");
  }
  if (n_tensors > c.remaining() / kMinTensorInfoBytes) {
    return format_error(name, "tensor count ", n_tensors, " cannot fit in the ", c.remaining(),
                        " bytes that remain");
  }

  metadata->reserve(static_cast<size_t>(n_kv));
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key;
    NVFP4MOE_RETURN_IF_ERROR(read_string(c, Where{name, no_key, "metadata key", i}, "key", &key));
    const Where w{name, key, "metadata key", i};
    if (metadata_index->count(key)) return format_error(name, "metadata key ", quote_untrusted(key), " appears twice");
    uint32_t type_raw;
    if (!c.read(&type_raw)) return truncated(w, c, "value type", 4);
    if (!is_valid_type(type_raw)) {
      return format_error(name, "metadata key ", quote_untrusted(key), ": value type ", type_raw,
                          " is not a GGUF value type (0..12)");
    }
    GgufValue value;
    NVFP4MOE_RETURN_IF_ERROR(read_value(c, w, static_cast<GgufType>(type_raw), 0, &value));
    metadata_index->emplace(key, metadata->size());
    metadata->emplace_back(std::move(key), std::move(value));
  }

  *alignment = kGgufDefaultAlignment;
  if (auto it = metadata_index->find(std::string_view("general.alignment")); it != metadata_index->end()) {
    const GgufValue& v = (*metadata)[it->second].second;
    if (v.type != GgufType::kUint32) {
      return format_error(name, "general.alignment has type ", gguf_type_name(v.type), ", expected uint32");
    }
    if (!detail::is_power_of_two(v.uint_value)) {
      return format_error(name, "general.alignment = ", v.uint_value, " is not a power of two");
    }
    *alignment = v.uint_value;
  }

  tensors->reserve(static_cast<size_t>(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    NVFP4MOE_RETURN_IF_ERROR(read_string(c, Where{name, no_key, "tensor", i}, "name", &t.name));
    const Where w{name, t.name, "tensor", i};
    auto fail = [&](const auto&... args) {
      return format_error(name, "tensor #", i, " ", quote_untrusted(t.name), ": ", args...);
    };
    if (tensor_index->count(t.name)) return fail("name appears twice");
    uint32_t n_dims;
    if (!c.read(&n_dims)) return truncated(w, c, "dimension count", 4);
    if (n_dims > static_cast<uint32_t>(kGgufMaxDims)) {
      return fail("dimension count ", n_dims, " exceeds ", kGgufMaxDims);
    }
    t.ne.resize(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      if (!c.read(&t.ne[d])) return truncated(w, c, "dimension", 8);
      if (t.ne[d] < 0) return fail("ne[", d, "] = ", t.ne[d], " is negative");
    }
    int64_t num_elements;
    if (!detail::checked_num_elements(t.ne, &num_elements)) return fail("element count overflows int64");
    if (!c.read(&t.type)) return truncated(w, c, "type", 4);
    if (!c.read(&t.offset)) return truncated(w, c, "data offset", 8);
    if (t.offset % *alignment != 0) {
      return fail("data offset ", t.offset, " is not a multiple of the alignment ", *alignment);
    }
    GgmlTypeInfo info;
    if (ggml_type_info(t.type, &info)) {
      std::string why;
      if (!tensor_byte_size(t.type, t.ne, &t.nbytes, &why)) return fail(why);
      t.size_known = true;
    }
    tensor_index->emplace(t.name, tensors->size());
    tensors->push_back(std::move(t));
  }

  if (!checked_align_up(c.pos(), *alignment, data_offset)) {
    return format_error(name, "data offset overflows");
  }
  const uint64_t file_size = bytes->size();
  const uint64_t data_size = *data_offset <= file_size ? file_size - *data_offset : 0;

  // Every known-size tensor must lie inside the data section, and no two may
  // overlap (a writer bug or a crafted file; either way the values would lie).
  std::vector<size_t> order;
  order.reserve(tensors->size());
  for (size_t i = 0; i < tensors->size(); ++i) {
    const GgufTensorInfo& t = (*tensors)[i];
    if (!t.size_known) continue;
    uint64_t end;
    if (!checked_add(t.offset, t.nbytes, &end) || end > data_size) {
      return format_error(name, "tensor #", i, " ", quote_untrusted(t.name), ": data [", t.offset, ", +", t.nbytes,
                          " bytes) ends past the end of the file (data section at offset ", *data_offset, " holds ",
                          data_size, " bytes)");
    }
    if (t.nbytes > 0) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return (*tensors)[a].offset < (*tensors)[b].offset; });
  for (size_t j = 1; j < order.size(); ++j) {
    const GgufTensorInfo& prev = (*tensors)[order[j - 1]];
    const GgufTensorInfo& next = (*tensors)[order[j]];
    if (prev.offset + prev.nbytes > next.offset) {
      return format_error(name, "tensors ", quote_untrusted(prev.name), " [", prev.offset, ", ", prev.offset + prev.nbytes,
                          ") and ", quote_untrusted(next.name), " [", next.offset, ", ", next.offset + next.nbytes,
                          ") overlap");
    }
  }
  return ok_status();
}

}  // namespace

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::kUint8: return "uint8";
    case GgufType::kInt8: return "int8";
    case GgufType::kUint16: return "uint16";
    case GgufType::kInt16: return "int16";
    case GgufType::kUint32: return "uint32";
    case GgufType::kInt32: return "int32";
    case GgufType::kFloat32: return "float32";
    case GgufType::kBool: return "bool";
    case GgufType::kString: return "string";
    case GgufType::kArray: return "array";
    case GgufType::kUint64: return "uint64";
    case GgufType::kInt64: return "int64";
    case GgufType::kFloat64: return "float64";
  }
  return "invalid";
}

size_t gguf_scalar_size(GgufType t) {
  switch (t) {
    case GgufType::kUint8: case GgufType::kInt8: case GgufType::kBool: return 1;
    case GgufType::kUint16: case GgufType::kInt16: return 2;
    case GgufType::kUint32: case GgufType::kInt32: case GgufType::kFloat32: return 4;
    case GgufType::kUint64: case GgufType::kInt64: case GgufType::kFloat64: return 8;
    default: return 0;
  }
}

// ---- GgufValue ---------------------------------------------------------------

GgufValue GgufValue::make_uint(GgufType t, uint64_t v) {
  GgufValue out;
  out.type = t;
  out.uint_value = v;
  return out;
}
GgufValue GgufValue::make_int(GgufType t, int64_t v) {
  GgufValue out;
  out.type = t;
  out.int_value = v;
  return out;
}
GgufValue GgufValue::make_float(GgufType t, double v) {
  GgufValue out;
  out.type = t;
  out.float_value = t == GgufType::kFloat32 ? static_cast<double>(static_cast<float>(v)) : v;
  return out;
}
GgufValue GgufValue::make_bool(bool v) { return make_uint(GgufType::kBool, v ? 1 : 0); }
GgufValue GgufValue::make_string(std::string v) {
  GgufValue out;
  out.type = GgufType::kString;
  out.string_value = std::move(v);
  return out;
}

namespace {
void append_element(GgufType elem, double d, int64_t i, bool from_int, std::vector<uint8_t>* out) {
  auto as_int = [&]() -> int64_t { return from_int ? i : static_cast<int64_t>(d); };
  switch (elem) {
    case GgufType::kUint8: case GgufType::kBool: detail::append_le<uint8_t>(out, static_cast<uint8_t>(as_int())); break;
    case GgufType::kInt8: detail::append_le<int8_t>(out, static_cast<int8_t>(as_int())); break;
    case GgufType::kUint16: detail::append_le<uint16_t>(out, static_cast<uint16_t>(as_int())); break;
    case GgufType::kInt16: detail::append_le<int16_t>(out, static_cast<int16_t>(as_int())); break;
    case GgufType::kUint32: detail::append_le<uint32_t>(out, static_cast<uint32_t>(as_int())); break;
    case GgufType::kInt32: detail::append_le<int32_t>(out, static_cast<int32_t>(as_int())); break;
    case GgufType::kUint64: detail::append_le<uint64_t>(out, static_cast<uint64_t>(as_int())); break;
    case GgufType::kInt64: detail::append_le<int64_t>(out, as_int()); break;
    case GgufType::kFloat32:
      detail::append_le<float>(out, from_int ? static_cast<float>(i) : static_cast<float>(d));
      break;
    case GgufType::kFloat64: detail::append_le<double>(out, from_int ? static_cast<double>(i) : d); break;
    default: break;
  }
}
}  // namespace

GgufValue GgufValue::make_array(GgufType elem, const std::vector<double>& values) {
  GgufValue out;
  out.type = GgufType::kArray;
  out.array_type = elem;
  out.array_size = values.size();
  for (double d : values) {
    if (elem == GgufType::kBool) d = d != 0.0 ? 1.0 : 0.0;
    append_element(elem, d, 0, false, &out.array_bytes);
  }
  return out;
}
GgufValue GgufValue::make_int_array(GgufType elem, const std::vector<int64_t>& values) {
  GgufValue out;
  out.type = GgufType::kArray;
  out.array_type = elem;
  out.array_size = values.size();
  for (int64_t i : values) {
    if (elem == GgufType::kBool) i = i != 0 ? 1 : 0;
    append_element(elem, 0.0, i, true, &out.array_bytes);
  }
  return out;
}
GgufValue GgufValue::make_string_array(std::vector<std::string> values) {
  GgufValue out;
  out.type = GgufType::kArray;
  out.array_type = GgufType::kString;
  out.array_size = values.size();
  out.array_strings = std::move(values);
  return out;
}
GgufValue GgufValue::make_array_of_arrays(std::vector<GgufValue> arrays) {
  GgufValue out;
  out.type = GgufType::kArray;
  out.array_type = GgufType::kArray;
  out.array_size = arrays.size();
  out.array_arrays = std::move(arrays);
  return out;
}

bool GgufValue::get_uint(uint64_t* out) const {
  if (!is_integer_type(type)) return false;
  if (is_signed_type(type)) {
    if (int_value < 0) return false;
    *out = static_cast<uint64_t>(int_value);
  } else {
    *out = uint_value;
  }
  return true;
}
bool GgufValue::get_int(int64_t* out) const {
  if (!is_integer_type(type)) return false;
  if (is_signed_type(type)) {
    *out = int_value;
  } else {
    if (uint_value > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(uint_value);
  }
  return true;
}
bool GgufValue::get_float(double* out) const {
  if (type == GgufType::kFloat32 || type == GgufType::kFloat64) {
    *out = float_value;
    return true;
  }
  if (!is_integer_type(type)) return false;
  *out = is_signed_type(type) ? static_cast<double>(int_value) : static_cast<double>(uint_value);
  return true;
}
bool GgufValue::get_bool(bool* out) const {
  if (type != GgufType::kBool) return false;
  *out = uint_value != 0;
  return true;
}

bool GgufValue::array_get_float(uint64_t i, double* out) const {
  if (type != GgufType::kArray || i >= array_size) return false;
  const size_t size = gguf_scalar_size(array_type);
  if (size == 0 || array_bytes.size() != array_size * size) return false;
  const uint8_t* p = array_bytes.data() + i * size;
  if (array_type == GgufType::kFloat32) {
    *out = detail::load_le<float>(p);
  } else if (array_type == GgufType::kFloat64) {
    *out = detail::load_le<double>(p);
  } else if (is_signed_type(array_type)) {
    *out = static_cast<double>(load_signed(array_type, p));
  } else {
    *out = static_cast<double>(load_unsigned(array_type, p));
  }
  return true;
}
bool GgufValue::array_get_int(uint64_t i, int64_t* out) const {
  if (type != GgufType::kArray || i >= array_size) return false;
  if (!is_integer_type(array_type) && array_type != GgufType::kBool) return false;
  const size_t size = gguf_scalar_size(array_type);
  if (array_bytes.size() != array_size * size) return false;
  const uint8_t* p = array_bytes.data() + i * size;
  if (is_signed_type(array_type)) {
    *out = load_signed(array_type, p);
    return true;
  }
  const uint64_t u = load_unsigned(array_type, p);
  if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  *out = static_cast<int64_t>(u);
  return true;
}

std::string GgufValue::to_string(size_t max_elements) const {
  std::ostringstream os;
  os.precision(9);
  switch (type) {
    case GgufType::kString: return quote_untrusted(string_value, 200);
    case GgufType::kBool: return uint_value ? "true" : "false";
    case GgufType::kFloat32: case GgufType::kFloat64: os << float_value; return os.str();
    case GgufType::kArray: {
      os << gguf_type_name(array_type) << "[" << array_size << "] [";
      const uint64_t shown = std::min<uint64_t>(array_size, max_elements);
      for (uint64_t i = 0; i < shown; ++i) {
        if (i) os << ", ";
        if (array_type == GgufType::kString) {
          os << quote_untrusted(array_strings[i], 40);
        } else if (array_type == GgufType::kArray) {
          os << array_arrays[i].to_string(max_elements);
        } else if (array_type == GgufType::kBool) {
          int64_t b = 0;
          array_get_int(i, &b);
          os << (b ? "true" : "false");
        } else if (is_integer_type(array_type)) {
          int64_t v = 0;
          if (array_get_int(i, &v)) {
            os << v;
          } else {
            os << load_unsigned(array_type, array_bytes.data() + i * 8);
          }
        } else {
          double d = 0;
          array_get_float(i, &d);
          os << d;
        }
      }
      if (shown < array_size) os << ", ...";
      os << "]";
      return os.str();
    }
    default:
      if (is_signed_type(type)) {
        os << int_value;
      } else {
        os << uint_value;
      }
      return os.str();
  }
}

// ---- ggml types ----------------------------------------------------------------

bool ggml_type_info(uint32_t type, GgmlTypeInfo* out) {
  struct Entry {
    uint32_t id;
    GgmlTypeInfo info;
  };
  // Block sizes from the ggml type definitions (values, bytes per block).
  static constexpr Entry kTypes[] = {
      {0, {"F32", 1, 4}},         {1, {"F16", 1, 2}},         {2, {"Q4_0", 32, 18}},
      {3, {"Q4_1", 32, 20}},      {6, {"Q5_0", 32, 22}},      {7, {"Q5_1", 32, 24}},
      {8, {"Q8_0", 32, 34}},      {9, {"Q8_1", 32, 36}},      {10, {"Q2_K", 256, 84}},
      {11, {"Q3_K", 256, 110}},   {12, {"Q4_K", 256, 144}},   {13, {"Q5_K", 256, 176}},
      {14, {"Q6_K", 256, 210}},   {15, {"Q8_K", 256, 292}},   {16, {"IQ2_XXS", 256, 66}},
      {17, {"IQ2_XS", 256, 74}},  {18, {"IQ3_XXS", 256, 98}}, {19, {"IQ1_S", 256, 50}},
      {20, {"IQ4_NL", 32, 18}},   {21, {"IQ3_S", 256, 110}},  {22, {"IQ2_S", 256, 82}},
      {23, {"IQ4_XS", 256, 136}}, {24, {"I8", 1, 1}},         {25, {"I16", 1, 2}},
      {26, {"I32", 1, 4}},        {27, {"I64", 1, 8}},        {28, {"F64", 1, 8}},
      {29, {"IQ1_M", 256, 56}},   {30, {"BF16", 1, 2}},       {34, {"TQ1_0", 256, 54}},
      {35, {"TQ2_0", 256, 66}},   {39, {"MXFP4", 32, 17}},    {40, {"NVFP4", 64, 36}},
      {41, {"Q1_0", 128, 18}},
  };
  for (const Entry& e : kTypes) {
    if (e.id == type) {
      *out = e.info;
      return true;
    }
  }
  return false;
}

std::string ggml_type_name(uint32_t type) {
  GgmlTypeInfo info;
  if (ggml_type_info(type, &info)) return info.name;
  return "type " + std::to_string(type);
}

int64_t GgufTensorInfo::num_elements() const {
  int64_t n = 0;
  return detail::checked_num_elements(ne, &n) ? n : -1;
}

std::vector<int64_t> GgufTensorInfo::numpy_shape() const { return std::vector<int64_t>(ne.rbegin(), ne.rend()); }

// ---- GgufFile ----------------------------------------------------------------

Status GgufFile::open(const std::string& path, GgufFile* out) {
  std::shared_ptr<const FileBytes> bytes;
  NVFP4MOE_RETURN_IF_ERROR(FileBytes::map(path, &bytes));
  return parse(std::move(bytes), path, out);
}

Status GgufFile::parse(const void* data, size_t size, const std::string& name, GgufFile* out) {
  try {
    return parse(FileBytes::copy_of(data, size), name, out);
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, name, ": out of memory copying ", size, " bytes");
  }
}

Status GgufFile::parse(std::shared_ptr<const FileBytes> bytes, const std::string& name, GgufFile* out) {
  if (!bytes) return invalid_argument("GgufFile::parse: bytes is null");
  GgufFile f;
  f.name_ = name;
  try {
    ParsedHeader h;
    NVFP4MOE_RETURN_IF_ERROR(parse_header(bytes.get(), name, &h));
    f.version_ = h.version;
    f.alignment_ = h.alignment;
    f.data_offset_ = h.data_offset;
    f.metadata_ = std::move(h.metadata);
    f.metadata_index_ = std::move(h.metadata_index);
    f.tensors_ = std::move(h.tensors);
    f.tensor_index_ = std::move(h.tensor_index);
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, name, ": out of memory while parsing the GGUF header");
  }
  f.bytes_ = std::move(bytes);
  *out = std::move(f);
  return ok_status();
}

const GgufValue* GgufFile::find(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

namespace {
Status missing_or_mistyped(const std::string& file, std::string_view key, const GgufValue* v, const char* want) {
  if (!v) return format_error(file, "metadata key ", quote_untrusted(key), " is missing");
  return format_error(file, "metadata key ", quote_untrusted(key), " has type ", gguf_type_name(v->type), " (value ",
                      v->to_string(4), "), expected ", want);
}
}  // namespace

Status GgufFile::get_uint(std::string_view key, uint64_t* out) const {
  const GgufValue* v = find(key);
  if (!v || !v->get_uint(out)) return missing_or_mistyped(name_, key, v, "a non-negative integer");
  return ok_status();
}
Status GgufFile::get_int(std::string_view key, int64_t* out) const {
  const GgufValue* v = find(key);
  if (!v || !v->get_int(out)) return missing_or_mistyped(name_, key, v, "an integer");
  return ok_status();
}
Status GgufFile::get_float(std::string_view key, double* out) const {
  const GgufValue* v = find(key);
  if (!v || !v->get_float(out)) return missing_or_mistyped(name_, key, v, "a number");
  return ok_status();
}
Status GgufFile::get_bool(std::string_view key, bool* out) const {
  const GgufValue* v = find(key);
  if (!v || !v->get_bool(out)) return missing_or_mistyped(name_, key, v, "bool");
  return ok_status();
}
Status GgufFile::get_string(std::string_view key, std::string* out) const {
  const GgufValue* v = find(key);
  if (!v || v->type != GgufType::kString) return missing_or_mistyped(name_, key, v, "string");
  *out = v->string_value;
  return ok_status();
}

std::string GgufFile::architecture() const {
  const GgufValue* v = find("general.architecture");
  return v && v->type == GgufType::kString ? v->string_value : std::string();
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Status GgufFile::tensor_bytes(const GgufTensorInfo& t, const uint8_t** data, uint64_t* size) const {
  if (!bytes_) return invalid_argument("GgufFile::tensor_bytes: no file is open");
  if (!t.size_known) {
    return make_status(StatusCode::kUnsupported, name_, ": tensor ", quote_untrusted(t.name), " has ggml ",
                       ggml_type_name(t.type), ", whose size nvfp4moe does not know");
  }
  // Re-check the info against this file, so that an info from another file
  // (or a modified one) can neither point outside the mapping nor promise
  // more values than its bytes hold.
  uint64_t expected;
  std::string why;
  if (!tensor_byte_size(t.type, t.ne, &expected, &why) || expected != t.nbytes) {
    return invalid_argument(name_, ": tensor ", quote_untrusted(t.name), ": nbytes ", t.nbytes,
                            " does not match its type and shape", why.empty() ? "" : " (", why,
                            why.empty() ? "" : ")");
  }
  uint64_t begin, end;
  if (!checked_add(data_offset_, t.offset, &begin) || !checked_add(begin, t.nbytes, &end) || end > bytes_->size()) {
    return invalid_argument(name_, ": tensor ", quote_untrusted(t.name), " [", t.offset, ", +", t.nbytes,
                            ") is not inside this file's data section");
  }
  *data = bytes_->data() + begin;
  *size = t.nbytes;
  return ok_status();
}

Status GgufFile::read_f32(const GgufTensorInfo& t, std::vector<float>* out) const {
  const uint8_t* data;
  uint64_t size;
  NVFP4MOE_RETURN_IF_ERROR(tensor_bytes(t, &data, &size));
  const int64_t n = t.num_elements();
  try {
    switch (t.type) {
      case kGgmlF32:
        out->resize(static_cast<size_t>(n));
        detail::convert_to_f32(detail::FloatKind::kF32, data, static_cast<size_t>(n), out->data());
        return ok_status();
      case kGgmlF16:
        out->resize(static_cast<size_t>(n));
        detail::convert_to_f32(detail::FloatKind::kF16, data, static_cast<size_t>(n), out->data());
        return ok_status();
      case kGgmlBF16:
        out->resize(static_cast<size_t>(n));
        detail::convert_to_f32(detail::FloatKind::kBF16, data, static_cast<size_t>(n), out->data());
        return ok_status();
      case kGgmlF64:
        out->resize(static_cast<size_t>(n));
        detail::convert_to_f32(detail::FloatKind::kF64, data, static_cast<size_t>(n), out->data());
        return ok_status();
      case kGgmlNvfp4: {
        out->resize(static_cast<size_t>(n));
        // An empty tensor may still declare a huge row length; the row
        // buffers below are sized from it only when there is data behind it.
        if (n == 0) return ok_status();
        const int64_t cols = t.ne[0];
        const int64_t rows = n / cols;
        std::vector<uint8_t> codes(static_cast<size_t>(cols / 2)), scales(static_cast<size_t>(cols / kScaleBlock));
        const auto* blocks = reinterpret_cast<const BlockNvfp4*>(data);
        const int64_t blocks_per_row = cols / kGgmlBlockValues;
        for (int64_t r = 0; r < rows; ++r) {
          NVFP4MOE_RETURN_IF_ERROR(
              ggml_to_canonical(blocks + r * blocks_per_row, 1, cols, codes.data(), scales.data()));
          dequantize_row(codes.data(), scales.data(), cols, out->data() + r * cols);
        }
        return ok_status();
      }
      default:
        return make_status(StatusCode::kUnsupported, name_, ": tensor ", quote_untrusted(t.name), " has ggml type ",
                           ggml_type_name(t.type), "; only F32, F16, BF16, F64 and NVFP4 can be read");
    }
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, name_, ": out of memory reading tensor ", quote_untrusted(t.name), " (", n,
                       " values)");
  }
}

Status GgufFile::read_nvfp4_experts(const GgufTensorInfo& t, ExpertWeights* out) const {
  if (t.type != kGgmlNvfp4) {
    return make_status(StatusCode::kUnsupported, name_, ": tensor ", quote_untrusted(t.name), " has ggml type ",
                       ggml_type_name(t.type), ", expected NVFP4");
  }
  if (t.ne.size() != 2 && t.ne.size() != 3) {
    return format_error(name_, "tensor ", quote_untrusted(t.name), " has ", t.ne.size(),
                        " dimensions; NVFP4 experts are ne = [K, N, E] or [K, N]");
  }
  const int64_t cols = t.ne[0], rows = t.ne[1], experts = t.ne.size() == 3 ? t.ne[2] : 1;
  if (cols <= 0 || rows <= 0 || experts <= 0) {
    return format_error(name_, "tensor ", quote_untrusted(t.name), " has an empty dimension (ne = [", cols, ", ", rows, ", ",
                        experts, "])");
  }
  const uint8_t* data;
  uint64_t size;
  NVFP4MOE_RETURN_IF_ERROR(tensor_bytes(t, &data, &size));
  try {
    ExpertWeights w;
    w.num_experts = experts;
    w.rows = rows;
    w.cols = cols;
    const auto total_rows = static_cast<size_t>(experts * rows);
    w.codes.resize(total_rows * static_cast<size_t>(cols / 2));
    w.scales.resize(total_rows * static_cast<size_t>(cols / kScaleBlock));
    NVFP4MOE_RETURN_IF_ERROR(ggml_to_canonical(reinterpret_cast<const BlockNvfp4*>(data), experts * rows, cols,
                                               w.codes.data(), w.scales.data()));
    *out = std::move(w);
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, name_, ": out of memory converting tensor ", quote_untrusted(t.name));
  }
  return ok_status();
}

}  // namespace nvfp4moe::io
