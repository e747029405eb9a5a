// GGUF v3 writer.
#include <new>

#include "io/io_util.hpp"
#include "nvfp4moe/io.hpp"
#include "nvfp4moe/layout.hpp"

namespace nvfp4moe::io {

using detail::append_bytes;
using detail::append_le;
using detail::quote_untrusted;

namespace {

constexpr uint32_t kGgufMagic = 0x46554747;
constexpr uint32_t kGgufVersion = 3;

void append_string(std::vector<uint8_t>* out, const std::string& s) {
  append_le<uint64_t>(out, s.size());
  append_bytes(out, s.data(), s.size());
}

Status append_value(std::vector<uint8_t>* out, const std::string& key, const GgufValue& v, int depth) {
  switch (v.type) {
    case GgufType::kString:
      append_string(out, v.string_value);
      return ok_status();
    case GgufType::kFloat32:
      append_le<float>(out, static_cast<float>(v.float_value));
      return ok_status();
    case GgufType::kFloat64:
      append_le<double>(out, v.float_value);
      return ok_status();
    case GgufType::kArray: {
      if (depth + 1 >= kGgufMaxArrayDepth && v.array_type == GgufType::kArray) {
        return invalid_argument("GGUF metadata ", quote_untrusted(key), ": arrays nested deeper than ", kGgufMaxArrayDepth);
      }
      append_le<uint32_t>(out, static_cast<uint32_t>(v.array_type));
      append_le<uint64_t>(out, v.array_size);
      if (v.array_type == GgufType::kString) {
        if (v.array_strings.size() != v.array_size) {
          return invalid_argument("GGUF metadata ", quote_untrusted(key), ": array_size ", v.array_size, " but ",
                                  v.array_strings.size(), " strings");
        }
        for (const std::string& s : v.array_strings) append_string(out, s);
      } else if (v.array_type == GgufType::kArray) {
        if (v.array_arrays.size() != v.array_size) {
          return invalid_argument("GGUF metadata ", quote_untrusted(key), ": array_size ", v.array_size, " but ",
                                  v.array_arrays.size(), " nested arrays");
        }
        for (const GgufValue& a : v.array_arrays) {
          if (a.type != GgufType::kArray) {
            return invalid_argument("GGUF metadata ", quote_untrusted(key), ": an array of arrays holds a ",
                                    gguf_type_name(a.type));
          }
          NVFP4MOE_RETURN_IF_ERROR(append_value(out, key, a, depth + 1));
        }
      } else {
        const size_t size = gguf_scalar_size(v.array_type);
        if (size == 0 || v.array_bytes.size() != v.array_size * size) {
          return invalid_argument("GGUF metadata ", quote_untrusted(key), ": array of ", v.array_size, " ",
                                  gguf_type_name(v.array_type), " holds ", v.array_bytes.size(), " bytes");
        }
        append_bytes(out, v.array_bytes.data(), v.array_bytes.size());
      }
      return ok_status();
    }
    case GgufType::kUint8: case GgufType::kBool: append_le<uint8_t>(out, static_cast<uint8_t>(v.uint_value)); break;
    case GgufType::kInt8: append_le<int8_t>(out, static_cast<int8_t>(v.int_value)); break;
    case GgufType::kUint16: append_le<uint16_t>(out, static_cast<uint16_t>(v.uint_value)); break;
    case GgufType::kInt16: append_le<int16_t>(out, static_cast<int16_t>(v.int_value)); break;
    case GgufType::kUint32: append_le<uint32_t>(out, static_cast<uint32_t>(v.uint_value)); break;
    case GgufType::kInt32: append_le<int32_t>(out, static_cast<int32_t>(v.int_value)); break;
    case GgufType::kUint64: append_le<uint64_t>(out, v.uint_value); break;
    case GgufType::kInt64: append_le<int64_t>(out, v.int_value); break;
    default:
      return invalid_argument("GGUF metadata ", quote_untrusted(key), ": value type ", static_cast<uint32_t>(v.type),
                              " is not a GGUF type");
  }
  return ok_status();
}

// Appends zero bytes up to the next multiple of alignment (relative to base).
void pad_to(std::vector<uint8_t>* out, uint64_t pos, uint64_t alignment) {
  const uint64_t rem = pos % alignment;
  if (rem) out->insert(out->end(), static_cast<size_t>(alignment - rem), 0);
}

}  // namespace

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (auto& kv : metadata_) {
    if (kv.first == key) {
      kv.second = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(key, std::move(value));
}

Status GgufWriter::add_tensor(const std::string& name, uint32_t type, const std::vector<int64_t>& ne,
                              std::vector<uint8_t> bytes) {
  for (const Tensor& t : tensors_) {
    if (t.name == name) return invalid_argument("GGUF tensor ", quote_untrusted(name), " was added twice");
  }
  if (ne.size() > static_cast<size_t>(kGgufMaxDims)) {
    return invalid_argument("GGUF tensor ", quote_untrusted(name), ": ", ne.size(), " dimensions exceed ", kGgufMaxDims);
  }
  GgmlTypeInfo info;
  if (!ggml_type_info(type, &info)) {
    return invalid_argument("GGUF tensor ", quote_untrusted(name), ": ggml type id ", type, " is unknown");
  }
  int64_t n;
  if (!detail::checked_num_elements(ne, &n)) {
    return invalid_argument("GGUF tensor ", quote_untrusted(name), ": negative dimension or element count overflow");
  }
  const int64_t row = ne.empty() ? 1 : ne[0];
  if (row % info.block_values != 0) {
    return invalid_argument("GGUF tensor ", quote_untrusted(name), ": ne[0] = ", row, " is not a multiple of ", info.name,
                            "'s block of ", info.block_values);
  }
  const uint64_t want = static_cast<uint64_t>(n / info.block_values) * static_cast<uint64_t>(info.block_bytes);
  if (bytes.size() != want) {
    return invalid_argument("GGUF tensor ", quote_untrusted(name), ": ", bytes.size(), " bytes given, ", info.name,
                            " of this shape takes ", want);
  }
  tensors_.push_back(Tensor{name, type, ne, std::move(bytes)});
  return ok_status();
}

Status GgufWriter::add_f32(const std::string& name, const std::vector<int64_t>& ne, const float* values) {
  int64_t n;
  if (!detail::checked_num_elements(ne, &n)) return invalid_argument("GGUF tensor ", quote_untrusted(name), ": bad shape");
  std::vector<uint8_t> bytes(static_cast<size_t>(n) * 4);
  if (n) std::memcpy(bytes.data(), values, bytes.size());
  return add_tensor(name, kGgmlF32, ne, std::move(bytes));
}

Status GgufWriter::add_f16(const std::string& name, const std::vector<int64_t>& ne, const float* values) {
  int64_t n;
  if (!detail::checked_num_elements(ne, &n)) return invalid_argument("GGUF tensor ", quote_untrusted(name), ": bad shape");
  std::vector<uint8_t> bytes;
  bytes.reserve(static_cast<size_t>(n) * 2);
  for (int64_t i = 0; i < n; ++i) append_le<uint16_t>(&bytes, detail::float_to_f16(values[i]));
  return add_tensor(name, kGgmlF16, ne, std::move(bytes));
}

Status GgufWriter::add_bf16(const std::string& name, const std::vector<int64_t>& ne, const float* values) {
  int64_t n;
  if (!detail::checked_num_elements(ne, &n)) return invalid_argument("GGUF tensor ", quote_untrusted(name), ": bad shape");
  std::vector<uint8_t> bytes;
  bytes.reserve(static_cast<size_t>(n) * 2);
  for (int64_t i = 0; i < n; ++i) append_le<uint16_t>(&bytes, float_to_bf16(values[i]));
  return add_tensor(name, kGgmlBF16, ne, std::move(bytes));
}

Status GgufWriter::add_nvfp4_experts(const std::string& base, const ExpertWeightsView& w) {
  if (w.num_experts <= 0 || w.rows <= 0 || w.cols <= 0 || w.cols % kGgmlBlockValues != 0) {
    return invalid_argument("GGUF tensor ", quote_untrusted(base), ": shape [E=", w.num_experts, ", N=", w.rows, ", K=", w.cols,
                            "] needs positive sizes and K % 64 == 0");
  }
  if (!w.codes || !w.scales) return invalid_argument("GGUF tensor ", quote_untrusted(base), ": codes or scales is null");
  const int64_t rows = w.num_experts * w.rows;
  try {
    std::vector<uint8_t> bytes(static_cast<size_t>(rows * (w.cols / kGgmlBlockValues)) * sizeof(BlockNvfp4));
    NVFP4MOE_RETURN_IF_ERROR(
        canonical_to_ggml(w.codes, w.scales, rows, w.cols, reinterpret_cast<BlockNvfp4*>(bytes.data())));
    NVFP4MOE_RETURN_IF_ERROR(add_tensor(base + ".weight", kGgmlNvfp4, {w.cols, w.rows, w.num_experts}, std::move(bytes)));
    if (w.alpha) NVFP4MOE_RETURN_IF_ERROR(add_f32(base + ".scale", {w.num_experts}, w.alpha));
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, "GGUF tensor ", quote_untrusted(base), ": out of memory");
  }
  return ok_status();
}

// Writes the header (and, with memory set, everything) and streams the
// tensor data to file when file is set.
Status GgufWriter::emit(AtomicFile* file, std::vector<uint8_t>* memory) const {
  if (!detail::is_power_of_two(alignment_)) {
    return invalid_argument("GGUF alignment ", alignment_, " is not a power of two");
  }
  std::vector<uint8_t> header;
  append_le<uint32_t>(&header, kGgufMagic);
  append_le<uint32_t>(&header, kGgufVersion);
  append_le<uint64_t>(&header, tensors_.size());
  std::vector<std::pair<std::string, GgufValue>> metadata;
  const bool has_alignment_key = [&] {
    for (const auto& kv : metadata_) {
      if (kv.first == "general.alignment") return true;
    }
    return false;
  }();
  if (has_alignment_key) {
    for (const auto& kv : metadata_) {
      if (kv.first == "general.alignment" &&
          (kv.second.type != GgufType::kUint32 || kv.second.uint_value != alignment_)) {
        return invalid_argument("GGUF metadata general.alignment = ", kv.second.to_string(),
                                " disagrees with the writer's alignment ", alignment_);
      }
    }
  }
  const bool add_alignment_key = !has_alignment_key && alignment_ != kGgufDefaultAlignment;
  append_le<uint64_t>(&header, metadata_.size() + (add_alignment_key ? 1 : 0));
  if (add_alignment_key) {
    append_string(&header, "general.alignment");
    append_le<uint32_t>(&header, static_cast<uint32_t>(GgufType::kUint32));
    append_le<uint32_t>(&header, alignment_);
  }
  for (const auto& [key, value] : metadata_) {
    append_string(&header, key);
    append_le<uint32_t>(&header, static_cast<uint32_t>(value.type));
    NVFP4MOE_RETURN_IF_ERROR(append_value(&header, key, value, 0));
  }
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    append_string(&header, t.name);
    append_le<uint32_t>(&header, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) append_le<int64_t>(&header, d);
    append_le<uint32_t>(&header, t.type);
    append_le<uint64_t>(&header, offset);
    offset += t.bytes.size();
    offset += (alignment_ - offset % alignment_) % alignment_;
  }
  pad_to(&header, header.size(), alignment_);

  std::vector<uint8_t> padding(alignment_, 0);
  if (memory) {
    *memory = std::move(header);
    for (const Tensor& t : tensors_) {
      append_bytes(memory, t.bytes.data(), t.bytes.size());
      pad_to(memory, memory->size(), alignment_);
    }
    return ok_status();
  }
  NVFP4MOE_RETURN_IF_ERROR(file->write(header.data(), header.size()));
  for (const Tensor& t : tensors_) {
    NVFP4MOE_RETURN_IF_ERROR(file->write(t.bytes.data(), t.bytes.size()));
    const uint64_t rem = t.bytes.size() % alignment_;
    if (rem) NVFP4MOE_RETURN_IF_ERROR(file->write(padding.data(), static_cast<size_t>(alignment_ - rem)));
  }
  return ok_status();
}

Status GgufWriter::serialize(std::vector<uint8_t>* out) const {
  try {
    return emit(nullptr, out);
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, "GgufWriter::serialize: out of memory");
  }
}

Status GgufWriter::write(const std::string& path) const {
  try {
    AtomicFile file;
    NVFP4MOE_RETURN_IF_ERROR(file.open(path));
    NVFP4MOE_RETURN_IF_ERROR(emit(&file, nullptr));
    return file.commit();
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, path, ": out of memory writing GGUF");
  }
}

}  // namespace nvfp4moe::io
