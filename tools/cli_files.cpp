// File subcommands: `inspect`, `dequant` and `quantize`.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "cli_common.hpp"
#include "cli_model.hpp"
#include "nvfp4moe/io.hpp"

namespace nvfp4moe::cli {

namespace {

// Columns padded to their widest cell, two spaces apart.
void print_columns(const std::vector<std::vector<std::string>>& rows) {
  if (rows.empty()) return;
  std::vector<size_t> width(rows[0].size());
  for (const auto& r : rows)
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  for (const auto& r : rows) {
    std::string line = " ";
    for (size_t i = 0; i < r.size(); ++i) {
      line += " " + r[i];
      if (i + 1 < r.size()) line += std::string(width[i] - r[i].size() + 1, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
}

std::string layers_summary(const std::vector<int64_t>& layers) {
  if (layers.empty()) return "none";
  std::string s;
  for (size_t i = 0; i < layers.size(); ++i) {
    size_t j = i;
    while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
    s += (s.empty() ? "" : ", ") + std::to_string(layers[i]) + (j > i ? "-" + std::to_string(layers[j]) : "");
    i = j;
  }
  return s + " (" + std::to_string(layers.size()) + ")";
}

bool matches(const std::string& name, const std::string& filter) {
  return filter.empty() || name.find(filter) != std::string::npos;
}

// ---- inspect ---------------------------------------------------------------------

struct InspectOptions {
  std::string path;
  std::string filter;
  bool no_metadata = false;
};

int inspect_gguf(const InspectOptions& o) {
  io::GgufFile f;
  const Status s = io::GgufFile::open(o.path, &f);
  if (!s.ok()) return fail("inspect", s);
  std::printf("%s: GGUF v%u, %s, alignment %llu, tensor data at byte %llu\n", o.path.c_str(), f.version(),
              human_bytes(static_cast<double>(f.file_size())).c_str(), static_cast<unsigned long long>(f.alignment()),
              static_cast<unsigned long long>(f.data_offset()));
  if (!f.architecture().empty()) std::printf("architecture: %s\n", printable(f.architecture()).c_str());
  if (!o.no_metadata) {
    std::printf("metadata: %zu keys\n", f.metadata().size());
    std::vector<std::vector<std::string>> rows;
    for (const auto& [key, value] : f.metadata()) {
      if (!matches(key, o.filter)) continue;
      rows.push_back({printable(key), io::gguf_type_name(value.type), printable(value.to_string())});
    }
    print_columns(rows);
  }
  std::printf("tensors: %zu\n", f.tensors().size());
  std::vector<std::vector<std::string>> rows = {{"name", "type", "ne (ggml)", "shape (numpy)", "size"}};
  for (const io::GgufTensorInfo& t : f.tensors()) {
    if (!matches(t.name, o.filter)) continue;
    rows.push_back({printable(t.name), io::ggml_type_name(t.type), shape_string(t.ne), shape_string(t.numpy_shape()),
                    t.size_known ? human_bytes(static_cast<double>(t.nbytes)) : "?"});
  }
  print_columns(rows);
  std::printf("MoE layers: %s\n", layers_summary(io::list_moe_layers(f)).c_str());
  return 0;
}

int inspect_safetensors(const InspectOptions& o) {
  io::SafetensorsCheckpoint ckpt;
  Status s = io::SafetensorsCheckpoint::open(o.path, &ckpt);
  if (!s.ok()) return fail("inspect", s);
  const std::vector<std::string> names = ckpt.tensor_names();
  std::printf("%s: safetensors, %zu tensors\n", o.path.c_str(), names.size());
  const io::CheckpointConfig& cfg = ckpt.config();
  if (!cfg.source.empty()) {
    std::printf("config (%s): quant_algo %s, group_size %lld, experts %lld, top_k %lld, norm_topk_prob %s\n",
                printable(cfg.source).c_str(), cfg.quant_algo.empty() ? "none" : printable(cfg.quant_algo).c_str(),
                static_cast<long long>(cfg.group_size), static_cast<long long>(cfg.num_experts),
                static_cast<long long>(cfg.top_k),
                cfg.has_norm_topk_prob ? (cfg.norm_topk_prob ? "true" : "false") : "not stated");
  }
  // __metadata__ belongs to one file: shown when the path is a single file.
  io::SafetensorsFile single;
  if (!o.no_metadata && io::SafetensorsFile::open(o.path, &single).ok() &&
      !single.metadata().empty()) {
    std::printf("metadata: %zu keys\n", single.metadata().size());
    std::vector<std::vector<std::string>> rows;
    for (const auto& [key, value] : single.metadata()) {
      if (!matches(key, o.filter)) continue;
      const std::string shown = value.size() > 120 ? value.substr(0, 117) + "..." : value;
      rows.push_back({printable(key), printable(shown)});
    }
    print_columns(rows);
  }
  std::vector<std::vector<std::string>> rows = {{"name", "dtype", "shape", "size"}};
  for (const std::string& name : names) {
    if (!matches(name, o.filter)) continue;
    const io::SafetensorsFile* file = nullptr;
    const io::SafetensorsTensorInfo* t = ckpt.find(name, &file);
    if (t == nullptr) continue;
    rows.push_back({printable(name), io::st_dtype_name(t->dtype), shape_string(t->shape),
                    human_bytes(static_cast<double>(t->end - t->begin))});
  }
  print_columns(rows);
  std::printf("MoE layers: %s\n", layers_summary(io::list_moe_layers(ckpt)).c_str());
  return 0;
}

int inspect_npy(const InspectOptions& o) {
  io::NpyArray a;
  Status s = io::read_npy(o.path, &a);
  if (!s.ok()) return fail("inspect", s);
  std::printf("%s: .npy %s %s, %lld elements\n", o.path.c_str(), io::npy_descr(a.dtype), shape_string(a.shape).c_str(),
              static_cast<long long>(a.num_elements()));
  std::vector<float> v;
  if (a.num_elements() > 0 && a.to_f32(&v).ok()) {
    double lo = std::numeric_limits<double>::infinity(), hi = -lo, sum = 0, sum_sq = 0;
    int64_t non_finite = 0;
    for (float x : v) {
      if (!std::isfinite(x)) {
        ++non_finite;
        continue;
      }
      lo = std::min<double>(lo, x);
      hi = std::max<double>(hi, x);
      sum += x;
      sum_sq += static_cast<double>(x) * x;
    }
    const double n = static_cast<double>(v.size() - non_finite);
    if (n > 0) {
      std::printf("  min %.6g, max %.6g, mean %.6g, rms %.6g", lo, hi, sum / n, std::sqrt(sum_sq / n));
      std::printf(non_finite ? ", %lld NaN/inf\n" : "\n", static_cast<long long>(non_finite));
    } else {
      std::printf("  all %lld values are NaN/inf\n", static_cast<long long>(non_finite));
    }
  }
  return 0;
}

int run_inspect(const InspectOptions& o) {
  FileKind kind;
  const Status s = detect_file_kind(o.path, &kind);
  if (!s.ok()) return fail("inspect", s);
  switch (kind) {
    case FileKind::kGguf: return inspect_gguf(o);
    case FileKind::kNpy: return inspect_npy(o);
    case FileKind::kSafetensors: return inspect_safetensors(o);
  }
  return kExitFailure;
}

// ---- dequant ----------------------------------------------------------------------

struct DequantOptions {
  std::string path, tensor, out;
};

int run_dequant(const DequantOptions& o) {
  ModelFile f;
  Status s = ModelFile::open(o.path, &f);
  if (!s.ok()) return fail("dequant", s);
  std::vector<float> values;
  std::vector<int64_t> shape;
  s = read_float_tensor(f, o.tensor, &values, &shape);
  if (!s.ok()) return fail("dequant", s);
  const bool nvfp4 = is_nvfp4_tensor(f, o.tensor);
  const std::string scale = nvfp4 ? companion_scale_name(f, o.tensor) : "";
  io::NpyArray a;
  try {
    a = io::NpyArray::from_f32(shape, values.data());
  } catch (const std::bad_alloc&) {
    return fail("dequant", make_status(StatusCode::kOutOfMemory, "out of memory building ", o.out));
  }
  values = {};
  s = io::write_npy(o.out, a);
  if (!s.ok()) return fail("dequant", make_status(s.code(), "--out: ", s.message()));
  std::fprintf(stderr, "nvfp4moe dequant: wrote %s: float32 %s%s\n", o.out.c_str(), shape_string(shape).c_str(),
               nvfp4 ? " (exact NVFP4 dequantization)" : "");
  if (!scale.empty()) {
    note("dequant", "the second-level scale '" + printable(scale) + "' is not applied (multiply by it per expert)");
  }
  return 0;
}

// ---- quantize ---------------------------------------------------------------------

struct QuantizeCliOptions {
  std::string in, out;
  std::vector<int64_t> layers;
  bool no_global_scale = false;
};

bool has_suffix(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// ModelOpt has no merged form: split [E][2F][H] into gate and up.
void split_gate_up(const ExpertWeights& merged, ExpertWeights* gate, ExpertWeights* up) {
  const int64_t E = merged.num_experts, F = merged.rows / 2, H = merged.cols;
  const size_t code_row = static_cast<size_t>(H / 2), scale_row = static_cast<size_t>(H / kScaleBlock);
  for (ExpertWeights* w : {gate, up}) {
    w->num_experts = E;
    w->rows = F;
    w->cols = H;
    w->codes.resize(static_cast<size_t>(E * F) * code_row);
    w->scales.resize(static_cast<size_t>(E * F) * scale_row);
    w->alpha = merged.alpha;
  }
  for (int64_t e = 0; e < E; ++e) {
    for (int half = 0; half < 2; ++half) {
      ExpertWeights* w = half == 0 ? gate : up;
      const size_t src_row = static_cast<size_t>(e * 2 * F + half * F), dst_row = static_cast<size_t>(e * F);
      std::copy_n(merged.codes.begin() + src_row * code_row, F * code_row, w->codes.begin() + dst_row * code_row);
      std::copy_n(merged.scales.begin() + src_row * scale_row, F * scale_row, w->scales.begin() + dst_row * scale_row);
    }
  }
}

int run_quantize(const QuantizeCliOptions& o) {
  const char* cmd = "quantize";
  const bool to_gguf = has_suffix(o.out, ".gguf");
  if (!to_gguf && !has_suffix(o.out, ".safetensors")) {
    return fail(cmd, invalid_argument("output '", o.out, "' must end in .gguf or .safetensors (that picks the format)"));
  }
  FileKind kind;
  Status s = detect_file_kind(o.in, &kind);
  if (!s.ok()) return fail(cmd, s);
  if (kind == FileKind::kNpy) return fail(cmd, invalid_argument(o.in, " is a .npy array, not a model"));
  std::vector<int64_t> available;
  s = io::list_moe_layers(o.in, &available);
  if (!s.ok()) return fail(cmd, s);
  if (available.empty()) {
    return fail(cmd, make_status(StatusCode::kInvalidArgument, o.in,
                                 ": no MoE expert tensors found (expected safetensors "
                                 "<prefix>layers.N.mlp.experts.E.{gate,up,down}_proj.weight or GGUF "
                                 "blk.N.ffn_*_exps.weight)"));
  }
  std::vector<int64_t> layers = o.layers.empty() ? available : o.layers;
  for (int64_t l : layers) {
    if (std::find(available.begin(), available.end(), l) == available.end()) {
      return fail(cmd, invalid_argument("--layers ", l, " has no experts in ", o.in, "; layers with experts: ",
                                        layers_summary(available)));
    }
  }
  std::string arch = "nvfp4moe";
  if (kind == FileKind::kGguf) {
    io::GgufFile g;
    if (io::GgufFile::open(o.in, &g).ok() && !g.architecture().empty()) arch = g.architecture();
  }

  io::MoeLoadOptions load;
  load.quantize_dense = true;
  load.quantize.global_scale = !o.no_global_scale;
  io::GgufWriter gguf;
  io::SafetensorsWriter st;
  int64_t num_experts = 0, top_k = 0;
  bool norm_topk = false;
  float weights_scale = 1.0f;
  int32_t gating = 0;
  const auto start = std::chrono::steady_clock::now();
  try {
    for (size_t i = 0; i < layers.size(); ++i) {
      const int64_t l = layers[i];
      io::MoeLayerFile m;
      s = io::load_moe_layer(o.in, l, &m, load);
      if (!s.ok()) return fail(cmd, s);
      num_experts = m.num_experts;
      top_k = m.top_k;
      norm_topk = m.norm_topk;
      weights_scale = m.weights_scale;
      gating = m.gating_func;
      if (to_gguf) {
        const std::string p = "blk." + std::to_string(l) + ".";
        if (m.merged) {
          s = gguf.add_nvfp4_experts(p + "ffn_gate_up_exps", m.gate_up.view());
        } else {
          s = gguf.add_nvfp4_experts(p + "ffn_gate_exps", m.gate.view());
          if (s.ok()) s = gguf.add_nvfp4_experts(p + "ffn_up_exps", m.up.view());
        }
        if (s.ok()) s = gguf.add_nvfp4_experts(p + "ffn_down_exps", m.down.view());
        if (s.ok() && !m.router.empty()) s = gguf.add_f32(p + "ffn_gate_inp.weight", {m.hidden, m.num_experts}, m.router.data());
      } else {
        const std::string p = "model.layers." + std::to_string(l) + ".mlp";
        if (m.merged) {
          ExpertWeights gate, up;
          split_gate_up(m.gate_up, &gate, &up);
          s = st.add_modelopt_experts(p + ".experts", "gate_proj", gate.view());
          if (s.ok()) s = st.add_modelopt_experts(p + ".experts", "up_proj", up.view());
        } else {
          s = st.add_modelopt_experts(p + ".experts", "gate_proj", m.gate.view());
          if (s.ok()) s = st.add_modelopt_experts(p + ".experts", "up_proj", m.up.view());
        }
        if (s.ok()) s = st.add_modelopt_experts(p + ".experts", "down_proj", m.down.view());
        if (s.ok() && !m.router.empty()) s = st.add_f32(p + ".gate.weight", {m.num_experts, m.hidden}, m.router.data());
      }
      if (!s.ok()) return fail(cmd, s);
      const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::fprintf(stderr, "nvfp4moe quantize: layer %lld (%zu/%zu): E=%lld, hidden %lld, ffn %lld%s (%.1f s)\n",
                   static_cast<long long>(l), i + 1, layers.size(), static_cast<long long>(m.num_experts),
                   static_cast<long long>(m.hidden), static_cast<long long>(m.ffn), m.merged ? ", merged gate_up" : "",
                   secs);
    }
    if (to_gguf) {
      using io::GgufType;
      using io::GgufValue;
      gguf.set("general.architecture", GgufValue::make_string(arch));
      gguf.set("general.quantized_by", GgufValue::make_string("nvfp4moe quantize"));
      gguf.set(arch + ".expert_count", GgufValue::make_uint(GgufType::kUint32, static_cast<uint64_t>(num_experts)));
      if (top_k > 0) gguf.set(arch + ".expert_used_count", GgufValue::make_uint(GgufType::kUint32, static_cast<uint64_t>(top_k)));
      gguf.set(arch + ".expert_weights_norm", GgufValue::make_bool(norm_topk));
      if (weights_scale != 1.0f) gguf.set(arch + ".expert_weights_scale", GgufValue::make_float(GgufType::kFloat32, weights_scale));
      if (gating != 0) gguf.set(arch + ".expert_gating_func", GgufValue::make_uint(GgufType::kUint32, static_cast<uint64_t>(gating)));
      s = gguf.write(o.out);
    } else {
      st.set_metadata("format", "pt");
      st.set_metadata("quantization_config", io::modelopt_nvfp4_quant_config_json());
      if (top_k > 0) st.set_metadata("num_experts_per_tok", std::to_string(top_k));
      st.set_metadata("norm_topk_prob", norm_topk ? "true" : "false");
      s = st.write(o.out);
    }
  } catch (const std::bad_alloc&) {
    return fail(cmd, make_status(StatusCode::kOutOfMemory, "out of memory quantizing ", o.in,
                                 " (the output is assembled in memory; try fewer --layers per run)"));
  }
  if (!s.ok()) return fail(cmd, s);
  std::fprintf(stderr, "nvfp4moe quantize: wrote %s: %zu MoE layer%s\n", o.out.c_str(), layers.size(),
               layers.size() == 1 ? "" : "s");
  return 0;
}

}  // namespace

Command add_inspect_command(CLI::App& app) {
  auto o = std::make_shared<InspectOptions>();
  CLI::App* sub =
      app.add_subcommand("inspect", "Show a GGUF / safetensors / .npy file's metadata, tensors and MoE layers");
  sub->add_option("FILE", o->path, "GGUF file, .safetensors file / index .json / directory, or .npy")->required();
  sub->add_option("--filter", o->filter, "Only keys and tensors whose name contains this text");
  sub->add_flag("--no-metadata", o->no_metadata, "Skip the metadata listing");
  return {sub, [o] { return run_inspect(*o); }};
}

Command add_dequant_command(CLI::App& app) {
  auto o = std::make_shared<DequantOptions>();
  CLI::App* sub = app.add_subcommand("dequant", "Write one tensor as exact float32 .npy");
  sub->footer(
      "NVFP4 is decoded exactly, without its second-level scale (.scale / weight_scale_2). The shape is ggml's ne "
      "reversed, e.g. ne [K, N, E] -> [E, N, K]. In safetensors names '*' stacks the experts: "
      "model.layers.0.mlp.experts.*.gate_proj.weight -> [E, N, K].");
  sub->add_option("FILE", o->path, "GGUF or safetensors file")->required();
  sub->add_option("TENSOR", o->tensor, "Tensor name")->required();
  sub->add_option("--out,-o", o->out, "Output .npy (written atomically)")->required();
  return {sub, [o] { return run_dequant(*o); }};
}

Command add_quantize_command(CLI::App& app) {
  auto o = std::make_shared<QuantizeCliOptions>();
  CLI::App* sub = app.add_subcommand("quantize", "Quantize a checkpoint's MoE experts to NVFP4 (GGUF or safetensors)");
  sub->footer(
      "Expert weights in F32/F16/BF16 are quantized (NVFP4 ones pass through) and written with the routers as GGUF "
      "(llama.cpp names, <name>.scale = alpha) or safetensors (ModelOpt names, weight_scale_2 = alpha), chosen by "
      "OUT's extension. Only the MoE layers are written, and the output is assembled in memory.");
  sub->add_option("IN", o->in, "safetensors file / index .json / directory, or GGUF")->required();
  sub->add_option("OUT", o->out, "Output .gguf or .safetensors (written atomically)")->required();
  sub->add_option("--layers", o->layers, "Only these layers (list; default all with experts)")->delimiter(',');
  sub->add_flag("--no-global-scale", o->no_global_scale,
                "alpha = 1 and block scales = amax/6 (default: ModelOpt two-level scaling)");
  return {sub, [o] { return run_quantize(*o); }};
}

}  // namespace nvfp4moe::cli
