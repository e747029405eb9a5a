// Compute subcommands on real tensors: `matmul-id` (ggml MUL_MAT_ID on one
// expert tensor) and `run` (one MoE FFN layer of a model file).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <numeric>
#include <string>
#include <type_traits>
#include <vector>

#include "bench.hpp"
#include "cli_common.hpp"
#include "cli_model.hpp"
#include "nvfp4moe/cuda.hpp"
#include "nvfp4moe/io.hpp"
#include "nvfp4moe/ops.hpp"
#include "nvfp4moe/plan.hpp"

#if defined(NVFP4MOE_WITH_CUDA)
#include <cuda_runtime.h>

#include "cuda/check.hpp"
#endif

namespace nvfp4moe::cli {

namespace {

// Runs op() and records its wall time (ms) on success or failure.
template <typename Op>
Status timed_ms(double* ms, Op&& op) {
  const auto t0 = std::chrono::steady_clock::now();
  const Status s = op();
  *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

// ---- device execution ------------------------------------------------------------

#if defined(NVFP4MOE_WITH_CUDA)
using cuda::cuda_status;

Status to_device(const void* host, size_t bytes, cuda::DeviceBuffer* out) {
  NVFP4MOE_RETURN_IF_ERROR(cuda::DeviceBuffer::allocate(bytes, out));
  if (bytes) return cuda_status(cudaMemcpy(out->get(), host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy to device");
  return ok_status();
}

Status from_device(const cuda::DeviceBuffer& b, void* host, size_t bytes) {
  if (!bytes) return ok_status();
  return cuda_status(cudaMemcpy(host, b.get(), bytes, cudaMemcpyDeviceToHost), "cudaMemcpy from device");
}

// One call on the default stream; *ms covers the op and its completion (not
// the uploads).
Status mul_mat_id_cuda(const MulMatIdArgs& a, Schedule schedule, double* ms) {
  std::unique_ptr<cuda::Context> ctx;
  NVFP4MOE_RETURN_IF_ERROR(cuda::Context::create(0, &ctx));
  cuda::DeviceExpertWeights w;
  NVFP4MOE_RETURN_IF_ERROR(cuda::upload_expert_weights(a.weights, &w));
  const int64_t x_rows = a.x_per_slot ? a.num_tokens * a.top_k : a.num_tokens;
  const size_t pairs = static_cast<size_t>(a.num_tokens * a.top_k);
  cuda::DeviceBuffer x, ids, y;
  NVFP4MOE_RETURN_IF_ERROR(to_device(a.x, sizeof(float) * x_rows * a.weights.cols, &x));
  NVFP4MOE_RETURN_IF_ERROR(to_device(a.ids, sizeof(int32_t) * pairs, &ids));
  NVFP4MOE_RETURN_IF_ERROR(cuda::DeviceBuffer::allocate(sizeof(float) * pairs * a.weights.rows, &y));
  cuda::CudaMulMatIdArgs d;
  d.weights = &w;
  d.x = x.get();
  d.x_dtype = DType::kF32;
  d.x_per_slot = a.x_per_slot;
  d.ids = ids.as<int32_t>();
  d.num_tokens = a.num_tokens;
  d.top_k = a.top_k;
  d.y = y.get();
  d.y_dtype = DType::kF32;
  d.schedule = schedule;
  NVFP4MOE_RETURN_IF_ERROR(timed_ms(ms, [&] {
    const Status st = cuda::mul_mat_id(*ctx, d, nullptr);
    return st.ok() ? ctx->check_device_status(nullptr) : st;
  }));
  return from_device(y, a.y, sizeof(float) * pairs * a.weights.rows);
}

Status moe_layer_cuda(const MoeLayerArgs& a, int64_t hidden, Schedule schedule, bool unfused, double* ms) {
  std::unique_ptr<cuda::Context> ctx;
  NVFP4MOE_RETURN_IF_ERROR(cuda::Context::create(0, &ctx));
  cuda::DeviceMoeLayer layer;
  NVFP4MOE_RETURN_IF_ERROR(cuda::upload_moe_layer(a.weights, a.act, &layer));
  const size_t pairs = static_cast<size_t>(a.num_tokens * a.top_k);
  cuda::DeviceBuffer x, ids, rw, out;
  NVFP4MOE_RETURN_IF_ERROR(to_device(a.x, sizeof(float) * a.num_tokens * hidden, &x));
  NVFP4MOE_RETURN_IF_ERROR(to_device(a.ids, sizeof(int32_t) * pairs, &ids));
  if (a.route_weights) NVFP4MOE_RETURN_IF_ERROR(to_device(a.route_weights, sizeof(float) * pairs, &rw));
  NVFP4MOE_RETURN_IF_ERROR(cuda::DeviceBuffer::allocate(sizeof(float) * a.num_tokens * hidden, &out));
  cuda::CudaMoeLayerArgs d;
  d.layer = &layer;
  d.x = x.get();
  d.x_dtype = DType::kF32;
  d.ids = ids.as<int32_t>();
  d.route_weights = a.route_weights ? rw.as<float>() : nullptr;
  d.num_tokens = a.num_tokens;
  d.top_k = a.top_k;
  d.out = out.as<float>();
  d.schedule = schedule;
  d.unfused = unfused;
  NVFP4MOE_RETURN_IF_ERROR(timed_ms(ms, [&] {
    const Status st = cuda::moe_layer(*ctx, d, nullptr);
    return st.ok() ? ctx->check_device_status(nullptr) : st;
  }));
  return from_device(out, a.out, sizeof(float) * a.num_tokens * hidden);
}
#else
Status no_cuda() {
  return make_status(StatusCode::kUnsupported,
                     "--device cuda: this nvfp4moe was built without CUDA (configure with -DNVFP4MOE_CUDA=ON)");
}
Status mul_mat_id_cuda(const MulMatIdArgs&, Schedule, double*) { return no_cuda(); }
Status moe_layer_cuda(const MoeLayerArgs&, int64_t, Schedule, bool, double*) { return no_cuda(); }
#endif

std::string device_label(Device d, int threads) {
  if (d == Device::kCpu) {
    const int n = threads > 0 ? threads : cpu_facts().usable_threads;
    return "cpu (" + std::to_string(n) + " thread" + (n == 1 ? "" : "s") + ")";
  }
  cuda::DeviceInfo info;
  return "cuda (" + (cuda::device_info(0, &info).ok() ? info.name : std::string("device 0")) + ")";
}

// --device and --schedule of matmul-id and run: the device to use ("auto"
// resolved) and the schedule.
Status parse_device_and_schedule(const std::string& device_text, const std::string& schedule_text, Device* device,
                                 Schedule* schedule) {
  Device requested;
  NVFP4MOE_RETURN_IF_ERROR(parse_device(device_text, &requested));
  NVFP4MOE_RETURN_IF_ERROR(resolve_device(requested, device));
  return bench::parse_schedule(schedule_text, schedule);
}

// ---- .npy inputs ------------------------------------------------------------------

// One .npy array converted to T (F32 or I32); errors name the option.
template <typename T>
Status read_npy_as(const std::string& option, const std::string& path, std::vector<T>* values,
                   std::vector<int64_t>* shape) {
  io::NpyArray a;
  Status s = io::read_npy(path, &a);
  if (s.ok()) {
    if constexpr (std::is_same_v<T, float>) s = a.to_f32(values);
    else s = a.to_i32(values);
  }
  if (!s.ok()) return Status(s.code(), option + ": " + s.message());
  *shape = a.shape;
  return ok_status();
}

Status write_f32_npy(const std::string& option, const std::string& path, const std::vector<int64_t>& shape,
                     const float* values) {
  Status s;
  try {
    s = io::write_npy(path, io::NpyArray::from_f32(shape, values));
  } catch (const std::bad_alloc&) {
    s = make_status(StatusCode::kOutOfMemory, "out of memory writing ", path);
  }
  return s.ok() ? s : Status(s.code(), option + ": " + s.message());
}

Status write_i32_npy(const std::string& option, const std::string& path, const std::vector<int64_t>& shape,
                     const int32_t* values) {
  const Status s = io::write_npy(path, io::NpyArray::from_i32(shape, values));
  return s.ok() ? s : Status(s.code(), option + ": " + s.message());
}

std::string stats_line(const std::vector<float>& y) {
  double sum_sq = 0;
  int64_t non_finite = 0;
  for (float v : y) {
    if (std::isfinite(v)) {
      sum_sq += static_cast<double>(v) * v;
    } else {
      ++non_finite;
    }
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "rms %.6g", y.empty() ? 0.0 : std::sqrt(sum_sq / static_cast<double>(y.size())));
  std::string s = buf;
  if (non_finite) s += ", " + std::to_string(non_finite) + " NaN/inf";
  if (!y.empty()) {
    s += ", first values";
    for (size_t i = 0; i < std::min<size_t>(4, y.size()); ++i) {
      std::snprintf(buf, sizeof buf, " %.6g", y[i]);
      s += buf;
    }
  }
  return s;
}

// ---- matmul-id ------------------------------------------------------------------

struct MatmulIdOptions {
  std::string weights, scale, input, ids, out;
  std::string device = "auto", schedule = "compact";
  int threads = 0;
};

int run_matmul_id(const MatmulIdOptions& o) {
  const char* cmd = "matmul-id";
  Device device;
  Schedule schedule;
  Status s = parse_device_and_schedule(o.device, o.schedule, &device, &schedule);
  if (!s.ok()) return fail(cmd, s);
  if (o.threads < 0) return fail(cmd, invalid_argument("--threads ", o.threads, " must be >= 0"));

  std::string weights_file, weights_tensor;
  s = split_file_tensor(o.weights, "--weights", &weights_file, &weights_tensor);
  if (!s.ok()) return fail(cmd, s);
  ModelFile model;
  s = ModelFile::open(weights_file, &model);
  if (!s.ok()) return fail(cmd, make_status(s.code(), "--weights: ", s.message()));
  ExpertWeights w;
  s = read_nvfp4_experts(model, weights_tensor, &w);
  if (!s.ok()) return fail(cmd, make_status(s.code(), "--weights: ", s.message()));

  if (!o.scale.empty()) {
    std::string scale_file, scale_tensor;
    s = split_file_tensor(o.scale, "--scale", &scale_file, &scale_tensor);
    if (!s.ok()) return fail(cmd, s);
    ModelFile scale_model;
    const ModelFile* sm = &model;
    if (scale_file != weights_file) {
      s = ModelFile::open(scale_file, &scale_model);
      if (!s.ok()) return fail(cmd, make_status(s.code(), "--scale: ", s.message()));
      sm = &scale_model;
    }
    std::vector<float> alpha;
    std::vector<int64_t> shape;
    s = read_float_tensor(*sm, scale_tensor, &alpha, &shape);
    if (!s.ok()) return fail(cmd, make_status(s.code(), "--scale: ", s.message()));
    if (alpha.size() != static_cast<size_t>(w.num_experts) && alpha.size() != 1) {
      return fail(cmd, invalid_argument("--scale ", o.scale, " has ", alpha.size(), " values ", shape_string(shape),
                                        "; the weights have ", w.num_experts, " experts (one value each, or 1)"));
    }
    w.alpha.assign(static_cast<size_t>(w.num_experts), alpha[0]);
    if (alpha.size() > 1) w.alpha = alpha;
  } else {
    const std::string companion = companion_scale_name(model, weights_tensor);
    if (!companion.empty()) {
      note(cmd, "'" + printable(companion) + "' is not applied (MUL_MAT_ID semantics); pass --scale " + weights_file +
                    ":" + printable(companion) + " to apply it");
    }
  }

  std::vector<float> x;
  std::vector<int64_t> x_shape, ids_shape;
  std::vector<int32_t> ids;
  s = read_npy_as<float>("--input", o.input, &x, &x_shape);
  if (s.ok()) s = read_npy_as<int32_t>("--ids", o.ids, &ids, &ids_shape);
  if (!s.ok()) return fail(cmd, s);
  if (ids_shape.size() != 2) {
    return fail(cmd, invalid_argument("--ids ", o.ids, " has shape ", shape_string(ids_shape), "; expected [T, k]"));
  }
  const int64_t T = ids_shape[0], k = ids_shape[1];
  const bool per_slot = x_shape.size() == 3;
  if (x_shape.size() != 2 && !per_slot) {
    return fail(cmd, invalid_argument("--input ", o.input, " has shape ", shape_string(x_shape),
                                      "; expected [T, K] or [T, k, K]"));
  }
  if (x_shape[0] != T || (per_slot && x_shape[1] != k)) {
    return fail(cmd, invalid_argument("--input ", o.input, " has shape ", shape_string(x_shape), " but --ids ", o.ids,
                                      " has ", shape_string(ids_shape), "; expected [", T, ", K] or [", T, ", ", k,
                                      ", K]"));
  }
  if (x_shape.back() != w.cols) {
    return fail(cmd, invalid_argument("--input ", o.input, " has K = ", x_shape.back(), " but the weights ",
                                      printable(weights_tensor), " have K = ", w.cols, " (rows of ", w.rows,
                                      " x ", w.cols, ", ", w.num_experts, " experts)"));
  }
  s = validate_ids(ids.data(), T, k, w.num_experts);
  if (!s.ok()) return fail(cmd, make_status(s.code(), "--ids ", o.ids, ": ", s.message()));

  std::vector<float> y;
  try {
    y.resize(static_cast<size_t>(T * k * w.rows));
  } catch (const std::bad_alloc&) {
    return fail(cmd, make_status(StatusCode::kOutOfMemory, "out of memory for y [", T, ", ", k, ", ", w.rows, "]"));
  }
  MulMatIdArgs a;
  a.weights = w.view();
  a.x = x.data();
  a.x_per_slot = per_slot;
  a.ids = ids.data();
  a.num_tokens = T;
  a.top_k = k;
  a.y = y.data();
  double ms = 0;
  if (device == Device::kCpu) {
    s = timed_ms(&ms, [&] { return mul_mat_id_cpu(a, CpuOptions{o.threads, schedule}); });
  } else {
    s = mul_mat_id_cuda(a, schedule, &ms);
  }
  if (!s.ok()) return fail(cmd, s);
  s = write_f32_npy("--out", o.out, {T, k, w.rows}, y.data());
  if (!s.ok()) return fail(cmd, s);
  std::printf("y %s float32 -> %s on %s in %.3f ms; %s\n", shape_string({T, k, w.rows}).c_str(), o.out.c_str(),
              device_label(device, o.threads).c_str(), ms, stats_line(y).c_str());
  return 0;
}

// ---- run -------------------------------------------------------------------------

struct RunOptions {
  std::string model;
  int64_t layer = -1;
  int64_t tokens = 0;
  std::string input, ids, route_weights, out, save_inputs;
  std::string device = "auto", schedule = "compact", activation = "auto";
  int threads = 0;
  int64_t top_k = 0;
  uint64_t seed = bench::kDefaultBenchSeed;
  bool quantize_dense = false;
  bool unfused = false;
};

// llama.cpp's expert_gating_func ids.
enum Gating : int32_t { kGatingUnset = 0, kGatingSoftmax = 1, kGatingSigmoid = 2, kGatingSoftmaxWeight = 3 };

// Top-k routing from the file's router: logits = router . x, then softmax (or
// sigmoid) probabilities, the k largest (ties to the lower expert), optional
// renormalisation and scale, as llama.cpp's build_moe_ffn does.
Status route_with_router(const io::MoeLayerFile& m, const std::vector<float>& x, int64_t T, int64_t k,
                         std::vector<int32_t>* ids, std::vector<float>* weights) {
  const int64_t E = m.num_experts, H = m.hidden;
  const int32_t gating = m.gating_func == kGatingUnset ? kGatingSoftmax : m.gating_func;
  if (gating != kGatingSoftmax && gating != kGatingSigmoid && gating != kGatingSoftmaxWeight) {
    return make_status(StatusCode::kUnsupported, m.source, ": expert_gating_func = ", m.gating_func,
                       " is not supported (1 softmax, 2 sigmoid, 3 softmax over the selected logits)");
  }
  ids->resize(static_cast<size_t>(T * k));
  weights->resize(static_cast<size_t>(T * k));
  std::vector<double> logits(static_cast<size_t>(E)), score(static_cast<size_t>(E));
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x.data() + t * H;
    for (int64_t e = 0; e < E; ++e) {
      const float* r = m.router.data() + e * H;
      double acc = 0;
      for (int64_t h = 0; h < H; ++h) acc += static_cast<double>(r[h]) * xt[h];
      logits[e] = acc;
    }
    if (gating == kGatingSoftmax) {
      const double mx = *std::max_element(logits.begin(), logits.end());
      double sum = 0;
      for (int64_t e = 0; e < E; ++e) sum += score[e] = std::exp(logits[e] - mx);
      for (double& v : score) v /= sum;
    } else if (gating == kGatingSigmoid) {
      for (int64_t e = 0; e < E; ++e) score[e] = 1.0 / (1.0 + std::exp(-logits[e]));
    } else {
      score = logits;
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return score[a] > score[b] || (score[a] == score[b] && a < b); });
    double sum = 0;
    std::vector<double> w(static_cast<size_t>(k));
    if (gating == kGatingSoftmaxWeight) {
      const double mx = logits[order[0]];
      for (int64_t j = 0; j < k; ++j) sum += w[j] = std::exp(logits[order[j]] - mx);
      for (double& v : w) v /= sum;
    } else {
      for (int64_t j = 0; j < k; ++j) sum += w[j] = score[order[j]];
      if (m.norm_topk && sum > 0)
        for (double& v : w) v /= sum;
    }
    for (int64_t j = 0; j < k; ++j) {
      (*ids)[t * k + j] = order[j];
      (*weights)[t * k + j] = static_cast<float>(w[j] * m.weights_scale);
    }
  }
  return ok_status();
}

// A lone .safetensors file has no config.json beside it to give top_k; the
// files `nvfp4moe quantize` writes carry it in their __metadata__ instead.
void adopt_file_metadata(const std::string& path, io::MoeLayerFile* m) {
  io::SafetensorsFile f;
  if (!io::SafetensorsFile::open(path, &f).ok()) return;
  const auto& md = f.metadata();
  const auto k = md.find("num_experts_per_tok");
  if (k == md.end()) return;
  char* end = nullptr;
  const long long v = std::strtoll(k->second.c_str(), &end, 10);
  if (end == k->second.c_str() || *end != '\0' || v < 1 || v > m->num_experts) return;
  m->top_k = v;
  const auto norm = md.find("norm_topk_prob");
  if (norm != md.end()) m->norm_topk = norm->second == "true";
}

Status choose_activation(const RunOptions& o, const io::MoeLayerFile& m, ActivationParams* act) {
  *act = ActivationParams{};
  std::string kind = o.activation;
  if (kind == "auto") {
    kind = "swiglu";
    io::GgufFile g;
    if (m.format == "gguf" && io::GgufFile::open(o.model, &g).ok() && g.architecture() == "gpt-oss") {
      kind = "swiglu-oai";
    }
  }
  if (kind == "swiglu") {
    act->kind = Activation::kSwiGLU;
  } else if (kind == "swiglu-oai") {
    act->kind = Activation::kSwiGLUOai;
  } else {
    return invalid_argument("--activation '", o.activation, "' is not one of auto, swiglu, swiglu-oai");
  }
  return ok_status();
}

int run_run(const RunOptions& o) {
  const char* cmd = "run";
  Device device;
  Schedule schedule;
  Status s = parse_device_and_schedule(o.device, o.schedule, &device, &schedule);
  if (!s.ok()) return fail(cmd, s);
  if (o.layer < 0) return fail(cmd, invalid_argument("--layer ", o.layer, " must be >= 0"));
  if ((o.tokens > 0) == !o.input.empty()) {
    return fail(cmd, invalid_argument("give either --tokens T (random x) or --input x.npy",
                                      o.tokens > 0 ? ", not both" : ""));
  }
  if (o.tokens < 0 || o.tokens > (int64_t{1} << 20))
    return fail(cmd, invalid_argument("--tokens ", o.tokens, " is not in [1, 1048576]"));
  if (!o.route_weights.empty() && o.ids.empty())
    return fail(cmd, invalid_argument("--route-weights needs --ids (without --ids the router computes both)"));
  if (o.unfused && device != Device::kCuda)
    return fail(cmd, invalid_argument("--unfused is the CUDA baseline; use it with --device cuda"));
  if (o.threads < 0) return fail(cmd, invalid_argument("--threads ", o.threads, " must be >= 0"));
  if (o.top_k < 0) return fail(cmd, invalid_argument("--top-k ", o.top_k, " must be >= 1"));

  io::MoeLoadOptions load;
  load.quantize_dense = o.quantize_dense;
  io::MoeLayerFile m;
  const auto load_start = std::chrono::steady_clock::now();
  s = io::load_moe_layer(o.model, o.layer, &m, load);
  if (!s.ok() && s.code() == StatusCode::kUnsupported && s.message().find("quantize_dense") != std::string::npos) {
    s = Status(s.code(), s.message() + "; --quantize-dense does that on load");
  }
  if (!s.ok()) return fail(cmd, s);
  if (m.top_k == 0 && m.format == "safetensors") adopt_file_metadata(o.model, &m);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
  if (load_s > 1) note(cmd, "loaded layer " + std::to_string(o.layer) + " in " + std::to_string(load_s).substr(0, 4) + " s");
  ActivationParams act;
  s = choose_activation(o, m, &act);
  if (!s.ok()) return fail(cmd, s);
  const int64_t H = m.hidden, E = m.num_experts;

  // x
  std::vector<float> x;
  int64_t T = o.tokens;
  if (!o.input.empty()) {
    std::vector<int64_t> shape;
    s = read_npy_as<float>("--input", o.input, &x, &shape);
    if (!s.ok()) return fail(cmd, s);
    if (shape.size() != 2 || shape[1] != H) {
      return fail(cmd, invalid_argument("--input ", o.input, " has shape ", shape_string(shape), "; layer ", o.layer,
                                        " needs [T, ", H, "] (hidden = ", H, ")"));
    }
    T = shape[0];
  } else {
    x = bench::random_activations(T * H, o.seed);
  }

  // ids and router weights
  std::vector<int32_t> ids;
  std::vector<float> route_weights;
  int64_t k = o.top_k > 0 ? o.top_k : m.top_k;
  std::string routing_label;
  if (!o.ids.empty()) {
    std::vector<int64_t> shape;
    s = read_npy_as<int32_t>("--ids", o.ids, &ids, &shape);
    if (!s.ok()) return fail(cmd, s);
    if (shape.size() != 2 || shape[0] != T) {
      return fail(cmd, invalid_argument("--ids ", o.ids, " has shape ", shape_string(shape), "; expected [", T,
                                        ", k] for ", T, " tokens"));
    }
    if (o.top_k > 0 && shape[1] != o.top_k) {
      return fail(cmd, invalid_argument("--ids ", o.ids, " has k = ", shape[1], " but --top-k is ", o.top_k));
    }
    k = shape[1];
    s = validate_ids(ids.data(), T, k, E);
    if (!s.ok()) return fail(cmd, make_status(s.code(), "--ids ", o.ids, ": ", s.message()));
    if (!o.route_weights.empty()) {
      s = read_npy_as<float>("--route-weights", o.route_weights, &route_weights, &shape);
      if (!s.ok()) return fail(cmd, s);
      if (shape != std::vector<int64_t>{T, k}) {
        return fail(cmd, invalid_argument("--route-weights ", o.route_weights, " has shape ", shape_string(shape),
                                          "; expected [", T, ", ", k, "] like --ids"));
      }
      routing_label = "ids from " + o.ids + ", weights from " + o.route_weights;
    } else {
      route_weights.assign(static_cast<size_t>(T * k), 1.0f);
      routing_label = "ids from " + o.ids + ", router weights 1";
    }
  } else {
    if (m.router.empty()) {
      return fail(cmd, invalid_argument(o.model, ": layer ", o.layer, " has no router tensor; pass --ids (and "
                                        "--route-weights)"));
    }
    if (k <= 0) {
      return fail(cmd, invalid_argument(o.model, " does not say how many experts a token uses; pass --top-k"));
    }
    if (k > E) return fail(cmd, invalid_argument("--top-k ", k, " exceeds the ", E, " experts"));
    s = route_with_router(m, x, T, k, &ids, &route_weights);
    if (!s.ok()) return fail(cmd, s);
    routing_label = "router top-" + std::to_string(k) + (m.norm_topk ? ", renormalised" : "") +
                    (m.weights_scale != 1.0f ? ", scale " + std::to_string(m.weights_scale) : "");
  }

  std::vector<float> y(static_cast<size_t>(T * H));
  MoeLayerArgs a;
  a.weights = m.weights();
  a.act = act;
  a.x = x.data();
  a.ids = ids.data();
  a.route_weights = route_weights.data();
  a.num_tokens = T;
  a.top_k = k;
  a.out = y.data();
  double ms = 0;
  if (device == Device::kCpu) {
    s = timed_ms(&ms, [&] { return moe_layer_cpu(a, CpuOptions{o.threads, schedule}); });
  } else {
    s = moe_layer_cuda(a, H, schedule, o.unfused, &ms);
  }
  if (!s.ok()) return fail(cmd, s);

  if (!o.out.empty()) {
    s = write_f32_npy("--out", o.out, {T, H}, y.data());
    if (!s.ok()) return fail(cmd, s);
  }
  if (!o.save_inputs.empty()) {
    s = write_f32_npy("--save-inputs", o.save_inputs + ".x.npy", {T, H}, x.data());
    if (s.ok()) s = write_i32_npy("--save-inputs", o.save_inputs + ".ids.npy", {T, k}, ids.data());
    if (s.ok()) s = write_f32_npy("--save-inputs", o.save_inputs + ".route_weights.npy", {T, k}, route_weights.data());
    if (!s.ok()) return fail(cmd, s);
  }
  std::printf("layer %lld of %s (%s): E=%lld k=%lld hidden=%lld ffn=%lld, %s, %s\n", static_cast<long long>(o.layer),
              o.model.c_str(), m.format.c_str(), static_cast<long long>(E), static_cast<long long>(k),
              static_cast<long long>(H), static_cast<long long>(m.ffn), m.merged ? "merged gate_up" : "gate and up",
              act.kind == Activation::kSwiGLUOai ? "swiglu-oai" : "swiglu");
  std::printf("routing: %s\n", routing_label.c_str());
  std::printf("y [%lld, %lld] float32%s on %s in %.3f ms; %s\n", static_cast<long long>(T), static_cast<long long>(H),
              o.out.empty() ? "" : (" -> " + o.out).c_str(), device_label(device, o.threads).c_str(), ms,
              stats_line(y).c_str());
  return 0;
}

}  // namespace

Command add_matmul_id_command(CLI::App& app) {
  auto o = std::make_shared<MatmulIdOptions>();
  CLI::App* sub = app.add_subcommand("matmul-id", "ggml MUL_MAT_ID on an NVFP4 expert tensor (.npy in, .npy out)");
  sub->footer(
      "y[t][j] = alpha[e] * W[e] . x,  e = ids[t][j]. x is [T, K] (one row per token) or [T, k, K] (one per slot), "
      "float32; ids [T, k] int32; y [T, k, N] float32. alpha is 1 unless --scale names it.");
  sub->add_option("--weights,-w", o->weights,
                  "FILE:TENSOR, e.g. m.gguf:blk.0.ffn_up_exps.weight or "
                  "ckpt/:model.layers.0.mlp.experts.*.up_proj.weight ('*' = expert index)")
      ->required();
  sub->add_option("--scale", o->scale, "FILE:TENSOR of per-expert alpha (E values or 1), e.g. "
                                       "m.gguf:blk.0.ffn_up_exps.scale");
  sub->add_option("--input,-x", o->input, "x .npy")->required();
  sub->add_option("--ids", o->ids, "ids .npy [T, k]")->required();
  sub->add_option("--out,-o", o->out, "y .npy (written atomically)")->required();
  sub->add_option("--device", o->device, "auto | cpu | cuda")->default_str("auto");
  sub->add_option("--schedule", o->schedule, "compact | rect")->default_str("compact");
  sub->add_option("--threads", o->threads, "CPU threads (0 = all usable)")->default_str("0");
  return {sub, [o] { return run_matmul_id(*o); }};
}

Command add_run_command(CLI::App& app) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* sub = app.add_subcommand("run", "Run one MoE FFN layer of a model file");
  sub->footer(
      "out[t] = sum_j w[t][j] * down[e](act(gate[e] . x[t], up[e] . x[t])),  e = ids[t][j]. Without --ids the "
      "file's router picks the experts (softmax or sigmoid top-k, renormalised when the model says so).");
  sub->add_option("--model,-m", o->model, "GGUF file or safetensors checkpoint")->required();
  sub->add_option("--layer,-l", o->layer, "Layer index")->required();
  sub->add_option("--tokens,-t", o->tokens, "Random x with T tokens (uniform in [-1, 1), --seed)");
  sub->add_option("--input,-x", o->input, "x .npy [T, hidden] float32");
  sub->add_option("--ids", o->ids, "ids .npy [T, k] int32 (default: the router's top-k)");
  sub->add_option("--route-weights", o->route_weights, "router weights .npy [T, k] float32 (with --ids; default 1)");
  sub->add_option("--out,-o", o->out, "out .npy [T, hidden] float32 (written atomically)");
  sub->add_option("--save-inputs", o->save_inputs,
                  "Also write PREFIX.x.npy, PREFIX.ids.npy and PREFIX.route_weights.npy as used");
  sub->add_option("--device", o->device, "auto | cpu | cuda")->default_str("auto");
  sub->add_option("--schedule", o->schedule, "compact | rect")->default_str("compact");
  sub->add_option("--threads", o->threads, "CPU threads (0 = all usable)")->default_str("0");
  sub->add_option("--top-k", o->top_k, "Experts per token (default: from the file)");
  sub->add_option("--activation", o->activation, "auto (swiglu-oai for GGUF gpt-oss, else swiglu) | swiglu | "
                                                 "swiglu-oai")
      ->default_str("auto");
  sub->add_option("--seed", o->seed, "Seed of the random x")->default_str(std::to_string(bench::kDefaultBenchSeed));
  sub->add_flag("--quantize-dense", o->quantize_dense, "Quantize F32/F16/BF16 expert weights to NVFP4 on load");
  sub->add_flag("--unfused", o->unfused, "CUDA only: the unfused baseline (separate scale, SwiGLU, combine passes)");
  return {sub, [o] { return run_run(*o); }};
}

}  // namespace nvfp4moe::cli
