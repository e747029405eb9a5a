// Assembling one MoE layer from a GGUF file or a safetensors checkpoint into
// the canonical layout (see io.hpp for the tensor names).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <map>
#include <new>
#include <set>

#include "io/io_util.hpp"
#include "nvfp4moe/io.hpp"

namespace nvfp4moe::io {

using detail::format_error;
using detail::quote_untrusted;

namespace {

constexpr int64_t kMaxLayer = 1 << 20;

std::string dims_text(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(d[i]);
  }
  return s + "]";
}

std::string layers_text(const std::vector<int64_t>& layers) {
  if (layers.empty()) return "none";
  std::string s;
  for (size_t i = 0; i < layers.size(); ++i) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    if (!s.empty()) s += ", ";
    s += std::to_string(layers[i]);
    if (j > i) s += "-" + std::to_string(layers[j]);
    i = j;
  }
  return s;
}

// Multiplies alpha (E values) by a per-expert or scalar scale and checks the
// result is usable.
Status apply_scale(const std::string& file, const std::string& scale_name, const std::vector<float>& scale,
                   std::vector<float>* alpha) {
  const size_t E = alpha->size();
  if (scale.size() != E && scale.size() != 1) {
    return format_error(file, "tensor ", quote_untrusted(scale_name), " has ", scale.size(), " values; expected ", E,
                        " (one per expert) or 1");
  }
  for (size_t e = 0; e < E; ++e) {
    const float s = scale.size() == 1 ? scale[0] : scale[e];
    if (!std::isfinite(s) || s < 0.0f) {
      return format_error(file, "tensor ", quote_untrusted(scale_name), "[", scale.size() == 1 ? 0 : e, "] = ", s,
                          " is not a finite non-negative scale");
    }
    (*alpha)[e] *= s;
  }
  return ok_status();
}

Status expand_per_expert(const std::string& file, const std::string& name, const std::vector<float>& v, size_t E,
                         std::vector<float>* out) {
  if (v.size() != E && v.size() != 1) {
    return format_error(file, "tensor ", quote_untrusted(name), " has ", v.size(), " values; expected ", E, " or 1");
  }
  out->assign(E, v[0]);
  if (v.size() == E) *out = v;
  return ok_status();
}

void check_alpha_filled(ExpertWeights* w) {
  if (w->alpha.empty()) w->alpha.assign(static_cast<size_t>(w->num_experts), 1.0f);
}

// ---- GGUF ---------------------------------------------------------------------

// One projection "<base>.weight" (+ .scale, .input_scale). found = false when
// the weight is absent.
Status gguf_projection(const GgufFile& f, const std::string& base, const MoeLoadOptions& opt, ExpertWeights* w,
                       std::vector<float>* input_scale, bool* found) {
  const std::string weight_name = base + ".weight";
  const GgufTensorInfo* t = f.find_tensor(weight_name);
  *found = t != nullptr;
  if (!t) return ok_status();
  if (t->ne.size() != 3) {
    return format_error(f.name(), "tensor ", quote_untrusted(weight_name), " has ne = ", dims_text(t->ne),
                        "; expert tensors are ne = [K, N, E]");
  }
  if (t->type == kGgmlNvfp4) {
    NVFP4MOE_RETURN_IF_ERROR(f.read_nvfp4_experts(*t, w));
  } else if (t->type == kGgmlF32 || t->type == kGgmlF16 || t->type == kGgmlBF16) {
    if (!opt.quantize_dense) {
      return make_status(StatusCode::kUnsupported, f.name(), ": tensor ", quote_untrusted(weight_name), " is ",
                         ggml_type_name(t->type), ", not NVFP4 (quantize it first, or load with quantize_dense)");
    }
    std::vector<float> dense;
    NVFP4MOE_RETURN_IF_ERROR(f.read_f32(*t, &dense));
    Status s = quantize_experts(dense.data(), t->ne[2], t->ne[1], t->ne[0], opt.quantize, w);
    if (!s.ok()) return Status(s.code(), f.name() + ": quantizing " + quote_untrusted(weight_name) + ": " + s.message());
  } else {
    return make_status(StatusCode::kUnsupported, f.name(), ": tensor ", quote_untrusted(weight_name), " has ggml type ",
                       ggml_type_name(t->type), "; expert weights must be NVFP4 (or F32/F16/BF16 to quantize)");
  }
  check_alpha_filled(w);
  const size_t E = static_cast<size_t>(w->num_experts);
  if (const GgufTensorInfo* s = f.find_tensor(base + ".scale")) {
    std::vector<float> scale;
    NVFP4MOE_RETURN_IF_ERROR(f.read_f32(*s, &scale));
    NVFP4MOE_RETURN_IF_ERROR(apply_scale(f.name(), s->name, scale, &w->alpha));
  }
  input_scale->clear();
  if (const GgufTensorInfo* s = f.find_tensor(base + ".input_scale")) {
    std::vector<float> v;
    NVFP4MOE_RETURN_IF_ERROR(f.read_f32(*s, &v));
    NVFP4MOE_RETURN_IF_ERROR(expand_per_expert(f.name(), s->name, v, E, input_scale));
  }
  return ok_status();
}

bool parse_decimal(std::string_view s, int64_t* out) {
  if (s.empty() || s.size() > 9) return false;
  int64_t v = 0;
  for (char ch : s) {
    if (ch < '0' || ch > '9') return false;
    v = v * 10 + (ch - '0');
  }
  // "007" is not how anyone numbers layers; refusing it keeps names one-to-one.
  if (s.size() > 1 && s[0] == '0') return false;
  *out = v;
  return true;
}

// ---- safetensors ------------------------------------------------------------

enum Proj { kGate = 0, kUp = 1, kDown = 2 };
constexpr const char* kProjName[3] = {"gate", "up", "down"};

// <prefix>layers.<L>.<block>.experts.<e>.<proj>.<field>
struct ExpertTensorName {
  std::string prefix;  // "model." or ""
  int64_t layer = 0;
  std::string block;  // "mlp" or "block_sparse_moe"
  int64_t expert = 0;
  Proj proj = kGate;
  std::string proj_name;  // as spelled: gate_proj, w1, ...
  std::string field;      // weight, weight_scale, weight_scale_2, input_scale
};

bool parse_expert_tensor_name(std::string_view name, ExpertTensorName* out) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const size_t dot = name.find('.', start);
    parts.push_back(name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
    if (parts.size() > 64) return false;
  }
  if (parts.size() < 7) return false;
  const size_t i = parts.size() - 7;
  if (parts[i] != "layers" || parts[i + 3] != "experts") return false;
  if (parts[i + 2] != "mlp" && parts[i + 2] != "block_sparse_moe") return false;
  if (!parse_decimal(parts[i + 1], &out->layer) || !parse_decimal(parts[i + 4], &out->expert)) return false;
  const std::string_view proj = parts[i + 5];
  if (proj == "gate_proj" || proj == "w1") {
    out->proj = kGate;
  } else if (proj == "up_proj" || proj == "w3") {
    out->proj = kUp;
  } else if (proj == "down_proj" || proj == "w2") {
    out->proj = kDown;
  } else {
    return false;
  }
  const std::string_view field = parts[i + 6];
  if (field != "weight" && field != "weight_scale" && field != "weight_scale_2" && field != "input_scale") {
    return false;
  }
  out->prefix.assign(name.substr(0, static_cast<size_t>(parts[i].data() - name.data())));
  out->block.assign(parts[i + 2]);
  out->proj_name.assign(proj);
  out->field.assign(field);
  return true;
}

struct FoundTensor {
  const SafetensorsFile* file = nullptr;
  const SafetensorsTensorInfo* info = nullptr;
};

Status st_read_f32(const FoundTensor& t, std::vector<float>* out) { return t.file->read_f32(*t.info, out); }

// The experts of one projection: fields by expert.
using ProjTensors = std::map<int64_t, std::map<std::string, FoundTensor>>;

Status st_projection(const SafetensorsCheckpoint& ckpt, const std::string& label, const ProjTensors& experts,
                     int64_t E, const MoeLoadOptions& opt, ExpertWeights* w, std::vector<float>* input_scale) {
  const std::string& ck = ckpt.name();
  auto field_of = [&](int64_t e, const char* field) -> const FoundTensor* {
    auto it = experts.find(e);
    if (it == experts.end()) return nullptr;
    auto f = it->second.find(field);
    return f == it->second.end() ? nullptr : &f->second;
  };
  for (int64_t e = 0; e < E; ++e) {
    if (!field_of(e, "weight")) {
      return format_error(ck, label, ": expert ", e, " has no weight tensor (experts 0..", E - 1, " are needed)");
    }
  }
  const FoundTensor& first = *field_of(0, "weight");
  const bool nvfp4 = first.info->dtype == StDType::kU8;
  const bool dense = first.info->dtype == StDType::kF32 || first.info->dtype == StDType::kF16 ||
                     first.info->dtype == StDType::kBF16;
  if (!nvfp4 && !dense) {
    return make_status(StatusCode::kUnsupported, ck, ": ", label, ": ", quote_untrusted(first.info->name), " has dtype ",
                       st_dtype_name(first.info->dtype),
                       "; expected U8 (ModelOpt NVFP4) or F32/F16/BF16 (to quantize)");
  }
  if (dense && !opt.quantize_dense) {
    return make_status(StatusCode::kUnsupported, ck, ": ", label, ": ", quote_untrusted(first.info->name), " is ",
                       st_dtype_name(first.info->dtype),
                       ", not ModelOpt NVFP4 (quantize it first, or load with quantize_dense)");
  }
  if (first.info->shape.size() != 2) {
    return format_error(ck, "tensor ", quote_untrusted(first.info->name), " has shape ", dims_text(first.info->shape),
                        "; expected 2 dimensions");
  }
  const int64_t N = first.info->shape[0];
  const int64_t K = nvfp4 ? first.info->shape[1] * 2 : first.info->shape[1];
  if (N <= 0 || K <= 0) return format_error(ck, "tensor ", quote_untrusted(first.info->name), " is empty");
  if (K % kKAlign != 0) {
    return make_status(StatusCode::kUnsupported, ck, ": ", label, ": K = ", K, " is not a multiple of ", kKAlign);
  }
  int64_t total = 0;
  if (__builtin_mul_overflow(E, N, &total) || __builtin_mul_overflow(total, K, &total)) {
    return format_error(ck, label, ": E x N x K overflows");
  }

  if (dense) {
    std::vector<float> all(static_cast<size_t>(total));
    std::vector<float> one;
    for (int64_t e = 0; e < E; ++e) {
      const FoundTensor& t = *field_of(e, "weight");
      if (t.info->shape != std::vector<int64_t>{N, K}) {
        return format_error(ck, "tensor ", quote_untrusted(t.info->name), " has shape ", dims_text(t.info->shape),
                            "; expert 0 has [", N, ", ", K, "]");
      }
      NVFP4MOE_RETURN_IF_ERROR(st_read_f32(t, &one));
      if (one.size() != static_cast<size_t>(N * K)) {
        return format_error(ck, "tensor ", quote_untrusted(t.info->name), " holds ", one.size(), " values");
      }
      std::copy(one.begin(), one.end(), all.begin() + e * N * K);
    }
    Status s = quantize_experts(all.data(), E, N, K, opt.quantize, w);
    if (!s.ok()) return Status(s.code(), ck + ": quantizing " + label + ": " + s.message());
  } else {
    w->num_experts = E;
    w->rows = N;
    w->cols = K;
    w->codes.resize(static_cast<size_t>(total / 2));
    w->scales.resize(static_cast<size_t>(total / kScaleBlock));
    w->alpha.assign(static_cast<size_t>(E), 1.0f);
    const size_t code_bytes = static_cast<size_t>(N * K / 2), scale_bytes = static_cast<size_t>(N * K / kScaleBlock);
    for (int64_t e = 0; e < E; ++e) {
      const FoundTensor& wt = *field_of(e, "weight");
      if (wt.info->dtype != StDType::kU8 || wt.info->shape != std::vector<int64_t>{N, K / 2}) {
        return format_error(ck, "tensor ", quote_untrusted(wt.info->name), " is ", st_dtype_name(wt.info->dtype), " ",
                            dims_text(wt.info->shape), "; expected U8 [", N, ", ", K / 2, "] like expert 0");
      }
      const FoundTensor* st = field_of(e, "weight_scale");
      if (!st) return format_error(ck, label, ": expert ", e, " has no weight_scale tensor");
      if ((st->info->dtype != StDType::kF8_E4M3 && st->info->dtype != StDType::kU8) ||
          st->info->shape != std::vector<int64_t>{N, K / kScaleBlock}) {
        return format_error(ck, "tensor ", quote_untrusted(st->info->name), " is ", st_dtype_name(st->info->dtype), " ",
                            dims_text(st->info->shape), "; expected F8_E4M3 [", N, ", ", K / kScaleBlock,
                            "] (NVFP4 group size 16)");
      }
      const uint8_t* p = nullptr;
      uint64_t n = 0;
      NVFP4MOE_RETURN_IF_ERROR(wt.file->tensor_bytes(*wt.info, &p, &n));
      if (n != code_bytes) return format_error(ck, "tensor ", quote_untrusted(wt.info->name), " holds ", n, " bytes");
      std::memcpy(w->codes.data() + e * code_bytes, p, code_bytes);
      NVFP4MOE_RETURN_IF_ERROR(st->file->tensor_bytes(*st->info, &p, &n));
      if (n != scale_bytes) return format_error(ck, "tensor ", quote_untrusted(st->info->name), " holds ", n, " bytes");
      std::memcpy(w->scales.data() + e * scale_bytes, p, scale_bytes);
      const FoundTensor* s2 = field_of(e, "weight_scale_2");
      if (!s2) return format_error(ck, label, ": expert ", e, " has no weight_scale_2 tensor (the per-expert alpha)");
      std::vector<float> v;
      NVFP4MOE_RETURN_IF_ERROR(st_read_f32(*s2, &v));
      if (v.size() != 1) {
        return format_error(ck, "tensor ", quote_untrusted(s2->info->name), " has ", v.size(), " values; expected a scalar");
      }
      w->alpha[e] = v[0];
    }
  }
  check_alpha_filled(w);
  for (int64_t e = 0; e < E; ++e) {
    if (!std::isfinite(w->alpha[e]) || w->alpha[e] < 0.0f) {
      return format_error(ck, label, ": expert ", e, " weight_scale_2 = ", w->alpha[e],
                          " is not a finite non-negative scale");
    }
  }
  // input_scale: all experts or none.
  input_scale->clear();
  size_t with_input_scale = 0;
  for (int64_t e = 0; e < E; ++e) with_input_scale += field_of(e, "input_scale") ? 1 : 0;
  if (with_input_scale != 0 && with_input_scale != static_cast<size_t>(E)) {
    return format_error(ck, label, ": ", with_input_scale, " of ", E, " experts have an input_scale");
  }
  if (with_input_scale) {
    input_scale->resize(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      std::vector<float> v;
      NVFP4MOE_RETURN_IF_ERROR(st_read_f32(*field_of(e, "input_scale"), &v));
      if (v.size() != 1) {
        return format_error(ck, "tensor ", quote_untrusted(field_of(e, "input_scale")->info->name), " has ", v.size(),
                            " values; expected a scalar");
      }
      (*input_scale)[e] = v[0];
    }
  }
  return ok_status();
}

Status check_layer_shapes(const std::string& file, const MoeLayerFile& m, const char* gate_name, const char* down_name) {
  const ExpertWeights& gate = m.merged ? m.gate_up : m.gate;
  const int64_t F = m.merged ? gate.rows / 2 : gate.rows;
  if (m.merged && gate.rows % 2 != 0) {
    return format_error(file, gate_name, ": merged gate_up has ", gate.rows, " rows, not an even 2F");
  }
  if (!m.merged && (m.up.num_experts != gate.num_experts || m.up.rows != gate.rows || m.up.cols != gate.cols)) {
    return format_error(file, "up [E=", m.up.num_experts, ", F=", m.up.rows, ", H=", m.up.cols,
                        "] does not match gate [E=", gate.num_experts, ", F=", gate.rows, ", H=", gate.cols, "]");
  }
  if (m.down.num_experts != gate.num_experts || m.down.rows != gate.cols || m.down.cols != F) {
    return format_error(file, down_name, " [E=", m.down.num_experts, ", H=", m.down.rows, ", F=", m.down.cols,
                        "] does not fit ", gate_name, " [E=", gate.num_experts, ", ", m.merged ? "2F=" : "F=",
                        gate.rows, ", H=", gate.cols, "]: down must be [E, H, F]");
  }
  return ok_status();
}

bool is_gguf_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char magic[4] = {};
  const ssize_t n = ::read(fd, magic, 4);
  ::close(fd);
  return n == 4 && std::memcmp(magic, "GGUF", 4) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

MoeLayerWeights MoeLayerFile::weights() const {
  MoeLayerWeights w;
  if (merged) {
    w.gate_up = gate_up.view();
  } else {
    w.gate = gate.view();
    w.up = up.view();
  }
  w.down = down.view();
  return w;
}

std::vector<int64_t> list_moe_layers(const GgufFile& file) {
  std::set<int64_t> layers;
  for (const auto& t : file.tensors()) {
    std::string_view n = t.name;
    if (n.substr(0, 4) != "blk.") continue;
    const size_t dot = n.find('.', 4);
    if (dot == std::string_view::npos) continue;
    const std::string_view rest = n.substr(dot + 1);
    int64_t layer;
    if (!parse_decimal(n.substr(4, dot - 4), &layer)) continue;
    if (rest == "ffn_down_exps.weight" || rest == "ffn_gate_up_exps.weight" || rest == "ffn_gate_exps.weight") {
      layers.insert(layer);
    }
  }
  return std::vector<int64_t>(layers.begin(), layers.end());
}

std::vector<int64_t> list_moe_layers(const SafetensorsCheckpoint& ckpt) {
  std::set<int64_t> layers;
  ExpertTensorName parsed;
  for (const std::string& name : ckpt.tensor_names()) {
    if (parse_expert_tensor_name(name, &parsed)) layers.insert(parsed.layer);
  }
  return std::vector<int64_t>(layers.begin(), layers.end());
}

Status load_moe_layer(const GgufFile& f, int64_t layer, MoeLayerFile* out, const MoeLoadOptions& opt) {
  if (layer < 0 || layer >= kMaxLayer) return invalid_argument("layer = ", layer, " is out of range [0, ", kMaxLayer, ")");
  try {
    MoeLayerFile m;
    m.source = f.name();
    m.format = "gguf";
    m.layer = layer;
    const std::string p = "blk." + std::to_string(layer) + ".";
    bool has_gate, has_up, has_gate_up, has_down;
    NVFP4MOE_RETURN_IF_ERROR(gguf_projection(f, p + "ffn_gate_exps", opt, &m.gate, &m.gate_input_scale, &has_gate));
    NVFP4MOE_RETURN_IF_ERROR(gguf_projection(f, p + "ffn_up_exps", opt, &m.up, &m.up_input_scale, &has_up));
    NVFP4MOE_RETURN_IF_ERROR(
        gguf_projection(f, p + "ffn_gate_up_exps", opt, &m.gate_up, &m.gate_up_input_scale, &has_gate_up));
    NVFP4MOE_RETURN_IF_ERROR(gguf_projection(f, p + "ffn_down_exps", opt, &m.down, &m.down_input_scale, &has_down));
    if (!has_gate && !has_up && !has_gate_up && !has_down) {
      return format_error(f.name(), "layer ", layer, " has no MoE expert tensors (", p, "ffn_{gate,up,down}_exps.weight or ",
                          p, "ffn_gate_up_exps.weight); layers with experts: ", layers_text(list_moe_layers(f)));
    }
    if (has_gate_up && (has_gate || has_up)) {
      return format_error(f.name(), "layer ", layer, " has both ", p, "ffn_gate_up_exps.weight and separate gate/up "
                          "expert tensors");
    }
    if (!has_gate_up && (!has_gate || !has_up)) {
      return format_error(f.name(), "layer ", layer, ": ", p, has_gate ? "ffn_up_exps" : "ffn_gate_exps",
                          ".weight is missing");
    }
    if (!has_down) return format_error(f.name(), "layer ", layer, ": ", p, "ffn_down_exps.weight is missing");
    m.merged = has_gate_up;
    const ExpertWeights& gate = m.merged ? m.gate_up : m.gate;
    NVFP4MOE_RETURN_IF_ERROR(check_layer_shapes(f.name(), m, m.merged ? "ffn_gate_up_exps" : "ffn_gate_exps",
                                                "ffn_down_exps"));
    m.num_experts = gate.num_experts;
    m.hidden = gate.cols;
    m.ffn = m.merged ? gate.rows / 2 : gate.rows;

    if (const GgufTensorInfo* r = f.find_tensor(p + "ffn_gate_inp.weight")) {
      if (r->ne.size() != 2 || r->ne[0] != m.hidden || r->ne[1] != m.num_experts) {
        return format_error(f.name(), "router ", quote_untrusted(r->name), " has ne = ", dims_text(r->ne), "; expected [H=",
                            m.hidden, ", E=", m.num_experts, "]");
      }
      NVFP4MOE_RETURN_IF_ERROR(f.read_f32(*r, &m.router));
    }

    const std::string arch = f.architecture();
    if (!arch.empty()) {
      if (f.find(arch + ".expert_count")) {
        uint64_t count;
        NVFP4MOE_RETURN_IF_ERROR(f.get_uint(arch + ".expert_count", &count));
        if (count != static_cast<uint64_t>(m.num_experts)) {
          return format_error(f.name(), arch, ".expert_count = ", count, " but the expert tensors hold ", m.num_experts,
                              " experts");
        }
      }
      if (f.find(arch + ".expert_used_count")) {
        uint64_t k;
        NVFP4MOE_RETURN_IF_ERROR(f.get_uint(arch + ".expert_used_count", &k));
        if (k < 1 || k > static_cast<uint64_t>(m.num_experts)) {
          return format_error(f.name(), arch, ".expert_used_count = ", k, " is out of range [1, ", m.num_experts, "]");
        }
        m.top_k = static_cast<int64_t>(k);
      }
      if (f.find(arch + ".expert_weights_norm")) NVFP4MOE_RETURN_IF_ERROR(f.get_bool(arch + ".expert_weights_norm", &m.norm_topk));
      if (f.find(arch + ".expert_weights_scale")) {
        double s;
        NVFP4MOE_RETURN_IF_ERROR(f.get_float(arch + ".expert_weights_scale", &s));
        if (!std::isfinite(s)) return format_error(f.name(), arch, ".expert_weights_scale = ", s, " is not finite");
        m.weights_scale = static_cast<float>(s);
      }
      if (f.find(arch + ".expert_gating_func")) {
        uint64_t g;
        NVFP4MOE_RETURN_IF_ERROR(f.get_uint(arch + ".expert_gating_func", &g));
        if (g > 255) return format_error(f.name(), arch, ".expert_gating_func = ", g, " is not a gating function id");
        m.gating_func = static_cast<int32_t>(g);
      }
    }
    *out = std::move(m);
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, f.name(), ": out of memory loading layer ", layer);
  }
  return ok_status();
}

Status load_moe_layer(const SafetensorsCheckpoint& ckpt, int64_t layer, MoeLayerFile* out, const MoeLoadOptions& opt) {
  if (layer < 0 || layer >= kMaxLayer) return invalid_argument("layer = ", layer, " is out of range [0, ", kMaxLayer, ")");
  const std::string& ck = ckpt.name();
  try {
    // prefix -> projection -> expert -> field -> tensor
    std::map<std::string, std::array<ProjTensors, 3>> by_prefix;
    ExpertTensorName parsed;
    for (const std::string& name : ckpt.tensor_names()) {
      if (!parse_expert_tensor_name(name, &parsed) || parsed.layer != layer) continue;
      if (!opt.tensor_prefix.empty() && parsed.prefix != opt.tensor_prefix) continue;
      const std::string key = parsed.prefix + "layers." + std::to_string(layer) + "." + parsed.block;
      FoundTensor t;
      t.info = ckpt.find(name, &t.file);
      if (!t.info) continue;
      by_prefix[key][parsed.proj][parsed.expert][parsed.field] = t;
    }
    if (by_prefix.empty()) {
      return format_error(ck, "layer ", layer, " has no MoE expert tensors (",
                          opt.tensor_prefix.empty() ? "<prefix>" : opt.tensor_prefix, "layers.", layer,
                          ".mlp.experts.<e>.{gate,up,down}_proj.weight); layers with experts: ",
                          layers_text(list_moe_layers(ckpt)));
    }
    if (by_prefix.size() > 1) {
      std::string names;
      for (const auto& kv : by_prefix) names += (names.empty() ? "" : ", ") + quote_untrusted(kv.first);
      return invalid_argument(ck, ": layer ", layer, " has experts under several prefixes (", names,
                              "); choose one with tensor_prefix");
    }
    const std::string& layer_prefix = by_prefix.begin()->first;  // e.g. model.layers.3.mlp
    const auto& projs = by_prefix.begin()->second;
    int64_t E = 0;
    for (int p = 0; p < 3; ++p) {
      if (projs[p].empty()) {
        return format_error(ck, "layer ", layer, ": no ", kProjName[p], " projection tensors under ",
                            quote_untrusted(layer_prefix + ".experts"));
      }
      E = std::max(E, projs[p].rbegin()->first + 1);
    }
    if (ckpt.config().group_size != 0 && ckpt.config().group_size != kScaleBlock) {
      return make_status(StatusCode::kUnsupported, ck, ": quantization group_size = ", ckpt.config().group_size,
                         " (", ckpt.config().source, "); NVFP4 needs 16");
    }

    MoeLayerFile m;
    m.source = ck;
    m.format = "safetensors";
    m.layer = layer;
    ExpertWeights* dest[3] = {&m.gate, &m.up, &m.down};
    std::vector<float>* input_scales[3] = {&m.gate_input_scale, &m.up_input_scale, &m.down_input_scale};
    for (int p = 0; p < 3; ++p) {
      const std::string label = layer_prefix + ".experts.*." + kProjName[p];
      NVFP4MOE_RETURN_IF_ERROR(st_projection(ckpt, label, projs[p], E, opt, dest[p], input_scales[p]));
    }
    NVFP4MOE_RETURN_IF_ERROR(check_layer_shapes(ck, m, "gate", "down"));
    m.num_experts = E;
    m.hidden = m.gate.cols;
    m.ffn = m.gate.rows;

    const std::string router_name = layer_prefix + ".gate.weight";
    const SafetensorsFile* rf = nullptr;
    if (const SafetensorsTensorInfo* r = ckpt.find(router_name, &rf)) {
      if (r->shape != std::vector<int64_t>{E, m.hidden}) {
        return format_error(ck, "router ", quote_untrusted(router_name), " has shape ", dims_text(r->shape), "; expected [E=", E,
                            ", H=", m.hidden, "]");
      }
      NVFP4MOE_RETURN_IF_ERROR(rf->read_f32(*r, &m.router));
    }

    const CheckpointConfig& cfg = ckpt.config();
    if (cfg.num_experts != 0 && cfg.num_experts != E) {
      return format_error(ck, "config says ", cfg.num_experts, " experts (", cfg.source, ") but layer ", layer, " has ",
                          E);
    }
    if (cfg.top_k != 0) {
      if (cfg.top_k > E) {
        return format_error(ck, "num_experts_per_tok = ", cfg.top_k, " exceeds the ", E, " experts (", cfg.source, ")");
      }
      m.top_k = cfg.top_k;
    }
    // Mixtral renormalises the selected weights and does not say so in its
    // config; Qwen-style configs carry norm_topk_prob.
    const bool mixtral_style = layer_prefix.size() >= 17 &&
                               layer_prefix.compare(layer_prefix.size() - 17, 17, ".block_sparse_moe") == 0;
    m.norm_topk = cfg.has_norm_topk_prob ? cfg.norm_topk_prob : mixtral_style;
    *out = std::move(m);
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, ck, ": out of memory loading layer ", layer);
  }
  return ok_status();
}

Status load_moe_layer(const std::string& path, int64_t layer, MoeLayerFile* out, const MoeLoadOptions& opt) {
  if (!is_directory(path) && is_gguf_file(path)) {
    GgufFile f;
    NVFP4MOE_RETURN_IF_ERROR(GgufFile::open(path, &f));
    return load_moe_layer(f, layer, out, opt);
  }
  SafetensorsCheckpoint ckpt;
  NVFP4MOE_RETURN_IF_ERROR(SafetensorsCheckpoint::open(path, &ckpt));
  return load_moe_layer(ckpt, layer, out, opt);
}

Status list_moe_layers(const std::string& path, std::vector<int64_t>* layers) {
  if (!is_directory(path) && is_gguf_file(path)) {
    GgufFile f;
    NVFP4MOE_RETURN_IF_ERROR(GgufFile::open(path, &f));
    *layers = list_moe_layers(f);
    return ok_status();
  }
  SafetensorsCheckpoint ckpt;
  NVFP4MOE_RETURN_IF_ERROR(SafetensorsCheckpoint::open(path, &ckpt));
  *layers = list_moe_layers(ckpt);
  return ok_status();
}

}  // namespace nvfp4moe::io
