#include "cli_model.hpp"

#include "cli_common.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <new>

namespace nvfp4moe::cli {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The names a '*' pattern stands for: expert 0, 1, ... while they exist.
Status expand_expert_pattern(const ModelFile& f, const std::string& pattern, std::vector<std::string>* names) {
  names->clear();
  const size_t star = pattern.find('*');
  if (star == std::string::npos) {
    names->push_back(pattern);
    return ok_status();
  }
  if (f.is_gguf) {
    return invalid_argument(f.path, ": '*' in '", printable(pattern),
                            "' expands expert indices of safetensors names; GGUF stores all experts in one tensor");
  }
  if (pattern.find('*', star + 1) != std::string::npos)
    return invalid_argument("'", printable(pattern), "' has more than one '*'");
  for (int64_t e = 0;; ++e) {
    std::string name = pattern.substr(0, star) + std::to_string(e) + pattern.substr(star + 1);
    if (!f.has_tensor(name)) break;
    names->push_back(std::move(name));
  }
  if (names->empty()) {
    return make_status(StatusCode::kInvalidArgument, f.path, ": no tensor matches '", printable(pattern), "' (",
                       printable(pattern.substr(0, star) + "0" + pattern.substr(star + 1)),
                       " is absent); tensors include ", f.some_tensor_names());
  }
  return ok_status();
}

Status missing_tensor(const ModelFile& f, const std::string& name) {
  return make_status(StatusCode::kInvalidArgument, f.path, ": no tensor '", printable(name), "'; tensors include ",
                     f.some_tensor_names());
}

// A ModelOpt weight name as given, or with ".weight" appended when only that exists.
std::string resolve_weight_name(const ModelFile& f, const std::string& name) {
  if (!f.has_tensor(name) && f.has_tensor(name + ".weight")) return name + ".weight";
  return name;
}

std::string resolve_weight_pattern(const ModelFile& f, const std::string& pattern) {
  const size_t star = pattern.find('*');
  if (star == std::string::npos || f.is_gguf) return resolve_weight_name(f, pattern);
  const std::string first = pattern.substr(0, star) + "0" + pattern.substr(star + 1);
  return !f.has_tensor(first) && f.has_tensor(first + ".weight") ? pattern + ".weight" : pattern;
}

const io::SafetensorsTensorInfo* st_find(const ModelFile& f, const std::string& name, const io::SafetensorsFile** file) {
  return f.checkpoint.find(name, file);
}

// One ModelOpt expert: codes and scales appended to out.
Status read_modelopt_expert(const ModelFile& f, const std::string& weight_name, int64_t* rows, int64_t* cols,
                            ExpertWeights* out) {
  const io::SafetensorsFile* wf = nullptr;
  const io::SafetensorsTensorInfo* w = st_find(f, weight_name, &wf);
  if (w == nullptr) return missing_tensor(f, weight_name);
  if (w->dtype != io::StDType::kU8 || w->shape.size() != 2) {
    return make_status(StatusCode::kInvalidArgument, f.path, ": '", printable(weight_name), "' is ",
                       io::st_dtype_name(w->dtype), " ", shape_string(w->shape),
                       "; an NVFP4 (ModelOpt) weight is U8 [N, K/2] with a .weight_scale");
  }
  const std::string scale_name = weight_name + "_scale";
  const io::SafetensorsFile* sf = nullptr;
  const io::SafetensorsTensorInfo* s = st_find(f, scale_name, &sf);
  const int64_t n = w->shape[0], k = w->shape[1] * 2;
  if (s == nullptr) {
    return make_status(StatusCode::kInvalidArgument, f.path, ": '", printable(weight_name),
                       "' has no '", printable(scale_name), "' (the NVFP4 block scales)");
  }
  if ((s->dtype != io::StDType::kF8_E4M3 && s->dtype != io::StDType::kU8) ||
      s->shape != std::vector<int64_t>{n, k / kScaleBlock} || k % kScaleBlock != 0) {
    return make_status(StatusCode::kFormatError, f.path, ": '", printable(scale_name), "' is ",
                       io::st_dtype_name(s->dtype), " ", shape_string(s->shape), "; expected F8_E4M3 [", n, ", ",
                       k / kScaleBlock, "] for weight ", shape_string(w->shape));
  }
  if (out->num_experts > 0 && (n != *rows || k != *cols)) {
    return make_status(StatusCode::kFormatError, f.path, ": '", printable(weight_name), "' is [", n, ", ", k / 2,
                       "] but expert 0 is [", *rows, ", ", *cols / 2, "]");
  }
  *rows = n;
  *cols = k;
  const uint8_t* p = nullptr;
  uint64_t size = 0;
  NVFP4MOE_RETURN_IF_ERROR(wf->tensor_bytes(*w, &p, &size));
  out->codes.insert(out->codes.end(), p, p + size);
  NVFP4MOE_RETURN_IF_ERROR(sf->tensor_bytes(*s, &p, &size));
  out->scales.insert(out->scales.end(), p, p + size);
  ++out->num_experts;
  return ok_status();
}

}  // namespace


Status detect_file_kind(const std::string& path, FileKind* out) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return make_status(StatusCode::kIoError, path, ": ", std::strerror(errno));
  if (S_ISDIR(st.st_mode)) {
    *out = FileKind::kSafetensors;
    return ok_status();
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return make_status(StatusCode::kIoError, path, ": ", std::strerror(errno));
  unsigned char magic[6] = {};
  const ssize_t n = ::read(fd, magic, sizeof magic);
  ::close(fd);
  if (n >= 4 && std::memcmp(magic, "GGUF", 4) == 0) {
    *out = FileKind::kGguf;
  } else if (n == 6 && std::memcmp(magic, "\x93NUMPY", 6) == 0) {
    *out = FileKind::kNpy;
  } else {
    *out = FileKind::kSafetensors;
  }
  return ok_status();
}

Status ModelFile::open(const std::string& path, ModelFile* out) {
  FileKind kind;
  NVFP4MOE_RETURN_IF_ERROR(detect_file_kind(path, &kind));
  ModelFile f;
  f.path = path;
  if (kind == FileKind::kNpy) {
    return invalid_argument(path, " is a .npy array, not a model file (GGUF or safetensors)");
  }
  try {
    if (kind == FileKind::kGguf) {
      f.is_gguf = true;
      NVFP4MOE_RETURN_IF_ERROR(io::GgufFile::open(path, &f.gguf));
    } else {
      NVFP4MOE_RETURN_IF_ERROR(io::SafetensorsCheckpoint::open(path, &f.checkpoint));
    }
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, path, ": out of memory opening the file");
  }
  *out = std::move(f);
  return ok_status();
}

bool ModelFile::has_tensor(const std::string& name) const {
  if (is_gguf) return gguf.find_tensor(name) != nullptr;
  const io::SafetensorsFile* file = nullptr;
  return checkpoint.find(name, &file) != nullptr;
}

std::string ModelFile::some_tensor_names(size_t max_names) const {
  std::vector<std::string> names;
  size_t total = 0;
  if (is_gguf) {
    total = gguf.tensors().size();
    for (size_t i = 0; i < total && names.size() < max_names; ++i) names.push_back(gguf.tensors()[i].name);
  } else {
    const std::vector<std::string> all = checkpoint.tensor_names();
    total = all.size();
    for (size_t i = 0; i < total && names.size() < max_names; ++i) names.push_back(all[i]);
  }
  if (names.empty()) return "none (the file has no tensors)";
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + printable(n);
  if (total > names.size()) s += ", ... (" + std::to_string(total) + " in all; `nvfp4moe inspect` lists them)";
  return s;
}

Status split_file_tensor(const std::string& arg, const std::string& option, std::string* file, std::string* tensor) {
  const size_t colon = arg.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == arg.size()) {
    return invalid_argument(option, " '", arg, "' is not FILE:TENSOR (e.g. model.gguf:blk.0.ffn_up_exps.weight)");
  }
  *file = arg.substr(0, colon);
  *tensor = arg.substr(colon + 1);
  return ok_status();
}

bool is_nvfp4_tensor(const ModelFile& f, const std::string& tensor) {
  if (f.is_gguf) {
    const io::GgufTensorInfo* t = f.gguf.find_tensor(tensor);
    return t != nullptr && t->type == io::kGgmlNvfp4;
  }
  std::string name = resolve_weight_pattern(f, tensor);
  const size_t star = name.find('*');
  if (star != std::string::npos) name = name.substr(0, star) + "0" + name.substr(star + 1);
  const io::SafetensorsFile* file = nullptr;
  const io::SafetensorsTensorInfo* t = st_find(f, name, &file);
  return t != nullptr && t->dtype == io::StDType::kU8 && f.has_tensor(name + "_scale");
}

Status read_nvfp4_experts(const ModelFile& f, const std::string& tensor, ExpertWeights* out) {
  try {
    if (f.is_gguf) {
      const io::GgufTensorInfo* t = f.gguf.find_tensor(tensor);
      if (t == nullptr) return missing_tensor(f, tensor);
      if (t->type != io::kGgmlNvfp4) {
        return make_status(StatusCode::kInvalidArgument, f.path, ": '", printable(tensor), "' is ",
                           io::ggml_type_name(t->type), ", not NVFP4");
      }
      if (t->ne.size() != 2 && t->ne.size() != 3) {
        return make_status(StatusCode::kInvalidArgument, f.path, ": '", printable(tensor), "' has ne = ",
                           shape_string(t->ne), "; expert weights are ne = [K, N, E] or [K, N]");
      }
      ExpertWeights w;
      NVFP4MOE_RETURN_IF_ERROR(f.gguf.read_nvfp4_experts(*t, &w));
      w.alpha.clear();
      *out = std::move(w);
      return ok_status();
    }
    std::vector<std::string> names;
    NVFP4MOE_RETURN_IF_ERROR(expand_expert_pattern(f, resolve_weight_pattern(f, tensor), &names));
    ExpertWeights w;
    int64_t rows = 0, cols = 0;
    for (const std::string& name : names) NVFP4MOE_RETURN_IF_ERROR(read_modelopt_expert(f, name, &rows, &cols, &w));
    w.rows = rows;
    w.cols = cols;
    *out = std::move(w);
    return ok_status();
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, f.path, ": out of memory reading '", printable(tensor), "'");
  }
}

Status read_float_tensor(const ModelFile& f, const std::string& tensor, std::vector<float>* values,
                         std::vector<int64_t>* shape) {
  try {
    if (f.is_gguf) {
      const io::GgufTensorInfo* t = f.gguf.find_tensor(tensor);
      if (t == nullptr) return missing_tensor(f, tensor);
      NVFP4MOE_RETURN_IF_ERROR(f.gguf.read_f32(*t, values));
      *shape = t->numpy_shape();
      return ok_status();
    }
    const bool stacked = tensor.find('*') != std::string::npos;
    if (is_nvfp4_tensor(f, tensor)) {
      ExpertWeights w;
      NVFP4MOE_RETURN_IF_ERROR(read_nvfp4_experts(f, tensor, &w));
      values->resize(static_cast<size_t>(w.num_experts * w.rows * w.cols));
      NVFP4MOE_RETURN_IF_ERROR(dequantize_experts(w.view(), false, values->data()));
      *shape = stacked ? std::vector<int64_t>{w.num_experts, w.rows, w.cols} : std::vector<int64_t>{w.rows, w.cols};
      return ok_status();
    }
    std::vector<std::string> names;
    NVFP4MOE_RETURN_IF_ERROR(expand_expert_pattern(f, tensor, &names));
    values->clear();
    std::vector<int64_t> first_shape;
    std::vector<float> one;
    for (const std::string& name : names) {
      const io::SafetensorsFile* file = nullptr;
      const io::SafetensorsTensorInfo* t = st_find(f, name, &file);
      if (t == nullptr) return missing_tensor(f, name);
      if (t->dtype == io::StDType::kU8 && !f.has_tensor(name + "_scale")) {
        return make_status(StatusCode::kUnsupported, f.path, ": '", printable(name),
                           "' is U8 without a '", printable(name + "_scale"),
                           "' next to it, so it is not an NVFP4 weight nvfp4moe can decode");
      }
      NVFP4MOE_RETURN_IF_ERROR(file->read_f32(*t, &one));
      if (&name != &names.front() && t->shape != first_shape) {
        return make_status(StatusCode::kFormatError, f.path, ": '", printable(name), "' has shape ",
                           shape_string(t->shape), " but '", printable(names.front()), "' has ", shape_string(first_shape));
      }
      first_shape = t->shape;
      values->insert(values->end(), one.begin(), one.end());
    }
    *shape = first_shape;
    if (stacked) shape->insert(shape->begin(), static_cast<int64_t>(names.size()));
    return ok_status();
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, f.path, ": out of memory reading '", printable(tensor), "'");
  }
}

std::string companion_scale_name(const ModelFile& f, const std::string& tensor) {
  if (f.is_gguf) {
    if (!ends_with(tensor, ".weight")) return "";
    const std::string scale = tensor.substr(0, tensor.size() - 7) + ".scale";
    return f.has_tensor(scale) ? scale : "";
  }
  const std::string weight = resolve_weight_pattern(f, tensor);
  const std::string scale = weight + "_scale_2";
  const size_t star = scale.find('*');
  const std::string first = star == std::string::npos ? scale : scale.substr(0, star) + "0" + scale.substr(star + 1);
  return f.has_tensor(first) ? scale : "";
}

std::string printable(const std::string& s) {
  std::string out;
  for (unsigned char c : s) {
    if (c < 0x20 || c >= 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

}  // namespace nvfp4moe::cli
