// Shared mechanisms of the readers and writers: overflow-checked arithmetic, a
// bounds-checked cursor, little-endian loads, F16 conversion, safe quoting of
// untrusted names in messages.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "nvfp4moe/status.hpp"

namespace nvfp4moe::io::detail {

// All return false on overflow.
inline bool checked_add(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_add_overflow(a, b, out); }
inline bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }
// alignment is a power of two.
inline bool checked_align_up(uint64_t x, uint64_t alignment, uint64_t* out) {
  uint64_t bumped;
  if (!checked_add(x, alignment - 1, &bumped)) return false;
  *out = bumped & ~(alignment - 1);
  return true;
}
inline bool is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }

// Product of dims (each >= 0) as an element count; false when it exceeds
// INT64_MAX.
bool checked_num_elements(const std::vector<int64_t>& dims, int64_t* out);

template <typename T>
inline T load_le(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // the library targets little-endian hosts only
  return v;
}
template <typename T>
inline void append_le(std::vector<uint8_t>* out, T v) {
  const size_t at = out->size();
  out->resize(at + sizeof(T));
  std::memcpy(out->data() + at, &v, sizeof(T));
}
inline void append_bytes(std::vector<uint8_t>* out, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  out->insert(out->end(), b, b + n);
}

// Reads from [data, data + size) without ever passing the end. Each read
// returns false when the bytes are not there, leaving the position unchanged.
class Cursor {
 public:
  Cursor(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  size_t pos() const { return pos_; }
  size_t size() const { return size_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename T>
  bool read(T* out) {
    if (remaining() < sizeof(T)) return false;
    *out = load_le<T>(data_ + pos_);
    pos_ += sizeof(T);
    return true;
  }
  // Points at n bytes and advances past them.
  bool take(uint64_t n, const uint8_t** out) {
    if (n > remaining()) return false;
    *out = data_ + pos_;
    pos_ += static_cast<size_t>(n);
    return true;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Untrusted text for an error message: printable ASCII kept, the rest escaped
// as \xNN, cut after max_chars, in single quotes.
std::string quote_untrusted(std::string_view s, size_t max_chars = 96);

float f16_to_float(uint16_t h);
uint16_t float_to_f16(float x);  // round to nearest even; overflow -> inf; NaN stays NaN

// Errors of the readers: "<file>: <what>".
template <typename... Args>
Status format_error(const std::string& file, const Args&... args) {
  return make_status(StatusCode::kFormatError, file, ": ", args...);
}

// Copies a byte range to T values without alignment assumptions.
template <typename T>
inline void copy_le_array(const uint8_t* src, size_t count, T* dst) {
  std::memcpy(dst, src, count * sizeof(T));
}

// Converts count elements of a float encoding to F32. kind: 0 F32, 1 F16,
// 2 BF16, 3 F64.
enum class FloatKind { kF32, kF16, kBF16, kF64 };
void convert_to_f32(FloatKind kind, const uint8_t* src, size_t count, float* dst);

// errno text of the last failed system call.
std::string errno_text(int err);

}  // namespace nvfp4moe::io::detail
