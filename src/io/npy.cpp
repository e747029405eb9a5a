// .npy reader and writer.
//
// "\x93NUMPY", major, minor, header length (u16 for 1.x, u32 for 2.x/3.x),
// then a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }
// padded with spaces and a newline, then the raw C-order data.
#include <cctype>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>

#include "io/io_util.hpp"
#include "nvfp4moe/io.hpp"

namespace nvfp4moe::io {

using detail::format_error;
using detail::quote_untrusted;

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kHeaderAlign = 64;
constexpr int kMaxRank = 64;

struct DTypeEntry {
  NpyDType dtype;
  char kind;  // 'f', 'i', 'u', 'b'
  size_t size;
  const char* descr;
};
constexpr DTypeEntry kDTypes[] = {
    {NpyDType::kF32, 'f', 4, "<f4"}, {NpyDType::kF64, 'f', 8, "<f8"}, {NpyDType::kF16, 'f', 2, "<f2"},
    {NpyDType::kI8, 'i', 1, "|i1"},  {NpyDType::kI16, 'i', 2, "<i2"}, {NpyDType::kI32, 'i', 4, "<i4"},
    {NpyDType::kI64, 'i', 8, "<i8"}, {NpyDType::kU8, 'u', 1, "|u1"},  {NpyDType::kU16, 'u', 2, "<u2"},
    {NpyDType::kU32, 'u', 4, "<u4"}, {NpyDType::kU64, 'u', 8, "<u8"}, {NpyDType::kBool, 'b', 1, "|b1"},
};

const DTypeEntry* entry_of(NpyDType t) {
  for (const auto& e : kDTypes) {
    if (e.dtype == t) return &e;
  }
  return nullptr;
}

// Tokenizer over the header dict. Every method skips leading spaces.
class Literal {
 public:
  explicit Literal(std::string_view s) : s_(s) {}
  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  bool eat(char ch) {
    skip_space();
    if (pos_ < s_.size() && s_[pos_] == ch) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool peek(char ch) {
    skip_space();
    return pos_ < s_.size() && s_[pos_] == ch;
  }
  bool string(std::string* out) {
    skip_space();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"')) return false;
    const char quote = s_[pos_];
    const size_t end = s_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) return false;
    out->assign(s_.substr(pos_ + 1, end - pos_ - 1));
    pos_ = end + 1;
    return true;
  }
  bool word(std::string_view w) {
    skip_space();
    if (s_.substr(pos_, w.size()) != w) return false;
    pos_ += w.size();
    return true;
  }
  // A non-negative decimal integer (Python 2 wrote a trailing L).
  bool integer(int64_t* out) {
    skip_space();
    size_t digits = 0;
    uint64_t v = 0;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
      if (++digits > 18) return false;
      v = v * 10 + static_cast<uint64_t>(s_[pos_] - '0');
      ++pos_;
    }
    if (digits == 0) return false;
    if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;
    *out = static_cast<int64_t>(v);
    return true;
  }
  bool at_end() {
    skip_space();
    return pos_ == s_.size();
  }
  size_t pos() const { return pos_; }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

Status parse_descr(const std::string& name, const std::string& descr, NpyDType* out) {
  if (descr.size() < 3) return make_status(StatusCode::kUnsupported, name, ": dtype descr ", quote_untrusted(descr), " is not supported");
  const char order = descr[0];
  const std::string body = descr.substr(1);
  if (order == '>') {
    return make_status(StatusCode::kUnsupported, name, ": big-endian dtype ", quote_untrusted(descr),
                       " is not supported (save it as little-endian '<')");
  }
  for (const auto& e : kDTypes) {
    if (body != std::string(e.descr + 1)) continue;
    // '|' means "not applicable", legal only for single-byte types; '<' and
    // '=' (native, little-endian on every host nvfp4moe runs on) for all.
    if (order == '<' || order == '=' || (order == '|' && e.size == 1)) {
      *out = e.dtype;
      return ok_status();
    }
  }
  return make_status(StatusCode::kUnsupported, name, ": dtype descr ", quote_untrusted(descr),
                     " is not supported (f2 f4 f8 i1 i2 i4 i8 u1 u2 u4 u8 b1, little-endian)");
}

Status parse_header(const std::string& name, std::string_view header, NpyDType* dtype, std::vector<int64_t>* shape) {
  Literal lit(header);
  auto bad = [&](const char* what) {
    return format_error(name, "npy header ", what, " at character ", lit.pos(), " of ", quote_untrusted(header, 200));
  };
  if (!lit.eat('{')) return bad("does not start with '{'");
  bool have_descr = false, have_order = false, have_shape = false;
  while (!lit.peek('}')) {
    std::string key;
    if (!lit.string(&key)) return bad("expected a quoted key");
    if (!lit.eat(':')) return bad("expected ':'");
    if (key == "descr") {
      std::string descr;
      if (lit.peek('\'') || lit.peek('"')) {
        if (!lit.string(&descr)) return bad("has an unterminated string");
      } else {
        return make_status(StatusCode::kUnsupported, name, ": npy descr is not a simple dtype string (structured "
                           "arrays are not supported)");
      }
      NVFP4MOE_RETURN_IF_ERROR(parse_descr(name, descr, dtype));
      have_descr = true;
    } else if (key == "fortran_order") {
      if (lit.word("True")) {
        return make_status(StatusCode::kUnsupported, name, ": fortran_order is True; only C-order arrays are "
                           "supported (save with np.ascontiguousarray)");
      }
      if (!lit.word("False")) return bad("fortran_order is neither True nor False");
      have_order = true;
    } else if (key == "shape") {
      if (!lit.eat('(')) return bad("shape is not a tuple");
      shape->clear();
      while (!lit.peek(')')) {
        int64_t d;
        if (!lit.integer(&d)) return bad("shape element is not a non-negative integer");
        if (shape->size() == kMaxRank) return bad("shape has too many dimensions");
        shape->push_back(d);
        if (!lit.eat(',')) break;
      }
      if (!lit.eat(')')) return bad("shape tuple is not closed");
      have_shape = true;
    } else {
      return format_error(name, "npy header has unexpected key ", quote_untrusted(key));
    }
    if (!lit.eat(',')) break;
  }
  if (!lit.eat('}')) return bad("dict is not closed");
  if (!lit.at_end()) return bad("has text after the dict");
  if (!have_descr || !have_order || !have_shape) {
    return format_error(name, "npy header lacks ", !have_descr ? "'descr'" : !have_order ? "'fortran_order'" : "'shape'");
  }
  return ok_status();
}

}  // namespace

const char* npy_descr(NpyDType t) {
  const DTypeEntry* e = entry_of(t);
  return e ? e->descr : "invalid";
}
size_t npy_dtype_size(NpyDType t) {
  const DTypeEntry* e = entry_of(t);
  return e ? e->size : 0;
}

int64_t NpyArray::num_elements() const {
  int64_t n = 0;
  return detail::checked_num_elements(shape, &n) ? n : -1;
}

NpyArray NpyArray::from_f32(std::vector<int64_t> shape, const float* values) {
  NpyArray a;
  a.dtype = NpyDType::kF32;
  a.shape = std::move(shape);
  const int64_t n = a.num_elements();
  if (n > 0) a.data.assign(reinterpret_cast<const uint8_t*>(values), reinterpret_cast<const uint8_t*>(values + n));
  return a;
}
NpyArray NpyArray::from_i32(std::vector<int64_t> shape, const int32_t* values) {
  NpyArray a;
  a.dtype = NpyDType::kI32;
  a.shape = std::move(shape);
  const int64_t n = a.num_elements();
  if (n > 0) a.data.assign(reinterpret_cast<const uint8_t*>(values), reinterpret_cast<const uint8_t*>(values + n));
  return a;
}

namespace {
Status check_data(const NpyArray& a, const char* who) {
  const int64_t n = a.num_elements();
  const size_t size = npy_dtype_size(a.dtype);
  if (n < 0 || size == 0) return invalid_argument(who, ": bad shape or dtype");
  uint64_t want;
  if (!detail::checked_mul(static_cast<uint64_t>(n), size, &want) || want != a.data.size()) {
    return invalid_argument(who, ": data holds ", a.data.size(), " bytes, shape and dtype need ", n, " x ", size);
  }
  return ok_status();
}
}  // namespace

Status NpyArray::to_f32(std::vector<float>* out) const {
  NVFP4MOE_RETURN_IF_ERROR(check_data(*this, "NpyArray::to_f32"));
  const size_t n = static_cast<size_t>(num_elements());
  out->resize(n);
  const uint8_t* p = data.data();
  for (size_t i = 0; i < n; ++i) {
    float v;
    switch (dtype) {
      case NpyDType::kF32: v = detail::load_le<float>(p + 4 * i); break;
      case NpyDType::kF64: v = static_cast<float>(detail::load_le<double>(p + 8 * i)); break;
      case NpyDType::kF16: v = detail::f16_to_float(detail::load_le<uint16_t>(p + 2 * i)); break;
      case NpyDType::kI8: v = detail::load_le<int8_t>(p + i); break;
      case NpyDType::kI16: v = detail::load_le<int16_t>(p + 2 * i); break;
      case NpyDType::kI32: v = static_cast<float>(detail::load_le<int32_t>(p + 4 * i)); break;
      case NpyDType::kI64: v = static_cast<float>(detail::load_le<int64_t>(p + 8 * i)); break;
      case NpyDType::kU8: case NpyDType::kBool: v = p[i]; break;
      case NpyDType::kU16: v = detail::load_le<uint16_t>(p + 2 * i); break;
      case NpyDType::kU32: v = static_cast<float>(detail::load_le<uint32_t>(p + 4 * i)); break;
      case NpyDType::kU64: v = static_cast<float>(detail::load_le<uint64_t>(p + 8 * i)); break;
      default: return invalid_argument("NpyArray::to_f32: bad dtype");
    }
    (*out)[i] = v;
  }
  return ok_status();
}

Status NpyArray::to_i32(std::vector<int32_t>* out) const {
  NVFP4MOE_RETURN_IF_ERROR(check_data(*this, "NpyArray::to_i32"));
  if (dtype == NpyDType::kF32 || dtype == NpyDType::kF64 || dtype == NpyDType::kF16) {
    return invalid_argument("NpyArray::to_i32: dtype ", npy_descr(dtype), " is floating point, expected integers");
  }
  const size_t n = static_cast<size_t>(num_elements());
  std::vector<int32_t> values(n);  // *out is only written on success
  const uint8_t* p = data.data();
  for (size_t i = 0; i < n; ++i) {
    int64_t v = 0;
    uint64_t u = 0;
    bool is_unsigned = false;
    switch (dtype) {
      case NpyDType::kI8: v = detail::load_le<int8_t>(p + i); break;
      case NpyDType::kI16: v = detail::load_le<int16_t>(p + 2 * i); break;
      case NpyDType::kI32: v = detail::load_le<int32_t>(p + 4 * i); break;
      case NpyDType::kI64: v = detail::load_le<int64_t>(p + 8 * i); break;
      case NpyDType::kU8: case NpyDType::kBool: v = p[i]; break;
      case NpyDType::kU16: v = detail::load_le<uint16_t>(p + 2 * i); break;
      case NpyDType::kU32: v = detail::load_le<uint32_t>(p + 4 * i); break;
      case NpyDType::kU64: u = detail::load_le<uint64_t>(p + 8 * i); is_unsigned = true; break;
      default: return invalid_argument("NpyArray::to_i32: bad dtype");
    }
    if (is_unsigned) {
      if (u > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
        return make_status(StatusCode::kOutOfRange, "npy element ", i, " = ", u, " does not fit int32");
      }
      v = static_cast<int64_t>(u);
    }
    if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) {
      return make_status(StatusCode::kOutOfRange, "npy element ", i, " = ", v, " does not fit int32");
    }
    values[i] = static_cast<int32_t>(v);
  }
  *out = std::move(values);
  return ok_status();
}

Status parse_npy(const void* data, size_t size, const std::string& name, NpyArray* out) {
  const auto* bytes = static_cast<const uint8_t*>(data);
  detail::Cursor c(bytes, size);
  const uint8_t* magic = nullptr;
  if (!c.take(kMagicLen, &magic) || std::memcmp(magic, kMagic, kMagicLen) != 0) {
    return format_error(name, "not a .npy file (no \\x93NUMPY magic)");
  }
  uint8_t major, minor;
  if (!c.read(&major) || !c.read(&minor)) return format_error(name, "npy version truncated");
  uint32_t header_len;
  if (major == 1) {
    uint16_t len16;
    if (!c.read(&len16)) return format_error(name, "npy header length truncated");
    header_len = len16;
  } else if (major == 2 || major == 3) {
    if (!c.read(&header_len)) return format_error(name, "npy header length truncated");
  } else {
    return make_status(StatusCode::kUnsupported, name, ": npy version ", static_cast<int>(major), ".",
                       static_cast<int>(minor), " is not supported (1.0, 2.0, 3.0)");
  }
  const uint8_t* header = nullptr;
  if (!c.take(header_len, &header)) {
    return format_error(name, "npy header length ", header_len, " runs past the end of the file (", c.remaining(),
                        " bytes remain)");
  }
  NpyArray a;
  try {
    NVFP4MOE_RETURN_IF_ERROR(
        parse_header(name, std::string_view(reinterpret_cast<const char*>(header), header_len), &a.dtype, &a.shape));
    int64_t n;
    uint64_t want;
    if (!detail::checked_num_elements(a.shape, &n) || !detail::checked_mul(static_cast<uint64_t>(n),
                                                                           npy_dtype_size(a.dtype), &want)) {
      return format_error(name, "npy shape's element count overflows");
    }
    if (want != c.remaining()) {
      return format_error(name, "npy data is ", c.remaining(), " bytes; shape and dtype ", npy_descr(a.dtype),
                          " need ", want);
    }
    const uint8_t* p = nullptr;
    (void)c.take(want, &p);
    a.data.assign(p, p + want);
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, name, ": out of memory reading npy data");
  }
  *out = std::move(a);
  return ok_status();
}

Status read_npy(const std::string& path, NpyArray* out) {
  std::shared_ptr<const FileBytes> bytes;
  NVFP4MOE_RETURN_IF_ERROR(FileBytes::map(path, &bytes));
  return parse_npy(bytes->data(), bytes->size(), path, out);
}

Status serialize_npy(const NpyArray& a, std::vector<uint8_t>* out) {
  NVFP4MOE_RETURN_IF_ERROR(check_data(a, "serialize_npy"));
  std::string dict = "{'descr': '";
  dict += npy_descr(a.dtype);
  dict += "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < a.shape.size(); ++i) {
    if (i) dict += ", ";
    dict += std::to_string(a.shape[i]);
  }
  if (a.shape.size() == 1) dict += ",";
  dict += "), }";
  // Pad with spaces and end with '\n' so the data starts 64-byte aligned.
  const bool v2 = dict.size() + 1 + kHeaderAlign > 65535;  // padded length must fit u16
  const size_t prefix = kMagicLen + 2 + (v2 ? 4 : 2);
  size_t total = prefix + dict.size() + 1;
  total = (total + kHeaderAlign - 1) / kHeaderAlign * kHeaderAlign;
  dict.append(total - prefix - dict.size() - 1, ' ');
  dict.push_back('\n');
  try {
    out->clear();
    out->reserve(total + a.data.size());
    detail::append_bytes(out, kMagic, kMagicLen);
    out->push_back(v2 ? 2 : 1);
    out->push_back(0);
    if (v2) {
      detail::append_le<uint32_t>(out, static_cast<uint32_t>(dict.size()));
    } else {
      detail::append_le<uint16_t>(out, static_cast<uint16_t>(dict.size()));
    }
    detail::append_bytes(out, dict.data(), dict.size());
    detail::append_bytes(out, a.data.data(), a.data.size());
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, "serialize_npy: out of memory");
  }
  return ok_status();
}

Status write_npy(const std::string& path, const NpyArray& a) {
  std::vector<uint8_t> bytes;
  NVFP4MOE_RETURN_IF_ERROR(serialize_npy(a, &bytes));
  return write_file_atomic(path, bytes.data(), bytes.size());
}

}  // namespace nvfp4moe::io
