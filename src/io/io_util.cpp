#include "io/io_util.hpp"

#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "nvfp4moe/format.hpp"

namespace nvfp4moe::io::detail {

bool checked_num_elements(const std::vector<int64_t>& dims, int64_t* out) {
  uint64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) return false;
    if (!checked_mul(n, static_cast<uint64_t>(d), &n)) return false;
  }
  if (n > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
  *out = static_cast<int64_t>(n);
  return true;
}

std::string quote_untrusted(std::string_view s, size_t max_chars) {
  std::string out = "'";
  size_t shown = 0;
  for (char c : s) {
    if (shown == max_chars) {
      out += "...";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7F && c != '\\' && c != '\'') {
      out += c;
    } else {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02X", u);
      out += buf;
    }
    ++shown;
  }
  out += "'";
  return out;
}

float f16_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    // Subnormal: value = mant * 2^-24; normalise it.
    int shift = 0;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      ++shift;
    }
    mant &= 0x3FFu;
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t float_to_f16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return static_cast<uint16_t>(sign | 0x7E00u);  // NaN
  if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // rounds to >= 65520: inf
  const int exp = static_cast<int>(abs >> 23) - 127;
  if (exp >= -14) {
    // Normal half: keep 10 mantissa bits, round to nearest even on the 13 dropped.
    uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
    const uint32_t dropped = m & 0x1FFFu;
    m >>= 13;
    if (dropped > 0x1000u || (dropped == 0x1000u && (m & 1u))) ++m;
    // m may carry into bit 11; adding it to the exponent field handles that.
    const uint32_t half = (static_cast<uint32_t>(exp + 15) << 10) + (m - 0x400u);
    return static_cast<uint16_t>(sign | half);
  }
  if (exp < -25) return sign;  // below half the smallest subnormal
  // Subnormal half: value / 2^-24 rounded to an integer.
  const uint32_t m = (abs & 0x7FFFFFu) | 0x800000u;
  const int shift = -exp - 14 + 13;  // 14 .. 24
  uint32_t q = m >> shift;
  const uint32_t rem = m & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1);
  if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
  return static_cast<uint16_t>(sign | q);
}

void convert_to_f32(FloatKind kind, const uint8_t* src, size_t count, float* dst) {
  if (count == 0) return;  // dst may be the null data() of an empty vector
  switch (kind) {
    case FloatKind::kF32:
      std::memcpy(dst, src, count * sizeof(float));
      return;
    case FloatKind::kF16:
      for (size_t i = 0; i < count; ++i) dst[i] = f16_to_float(load_le<uint16_t>(src + 2 * i));
      return;
    case FloatKind::kBF16:
      for (size_t i = 0; i < count; ++i) dst[i] = bf16_to_float(load_le<uint16_t>(src + 2 * i));
      return;
    case FloatKind::kF64:
      for (size_t i = 0; i < count; ++i) dst[i] = static_cast<float>(load_le<double>(src + 8 * i));
      return;
  }
}

std::string errno_text(int err) {
  char buf[256];
  // GNU strerror_r may return a static string instead of filling buf.
  const char* text = strerror_r(err, buf, sizeof(buf));
  return text ? std::string(text) : std::string("errno ") + std::to_string(err);
}

}  // namespace nvfp4moe::io::detail
