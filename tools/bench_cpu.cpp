// The CPU bench runner: times mul_mat_id_cpu / moe_layer_cpu on random NVFP4
// weights (generated once per preset and matrix, then reused by every case).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <utility>

#include "bench.hpp"

namespace nvfp4moe::bench {

namespace {

// One preset's matrices at a time: sweeps iterate presets outermost, and
// deepseek-v3's two matrices alone are 6 GB.
class WeightCache {
 public:
  const ExpertWeights& get(const Preset& p, Op matrix, uint64_t seed) {
    if (p.name != preset_ || seed != seed_) {
      matrices_.clear();
      preset_ = p.name;
      seed_ = seed;
    }
    auto it = matrices_.find(matrix);
    if (it == matrices_.end()) {
      int64_t rows = 0, cols = 0;
      op_shape(p, matrix, &rows, &cols);
      const double mb = static_cast<double>(p.num_experts) * rows * (cols / 2 + cols / kScaleBlock) / 1e6;
      std::fprintf(stderr, "bench: random NVFP4 weights for %s %s: %lld experts x %lld x %lld (%.0f MB)\n",
                   p.name.c_str(), op_name(matrix), static_cast<long long>(p.num_experts),
                   static_cast<long long>(rows), static_cast<long long>(cols), mb);
      const uint64_t matrix_seed = seed ^ (matrix == Op::kDown ? 0xD0ull : 0x6Aull);
      it = matrices_
               .emplace(matrix, std::make_unique<ExpertWeights>(
                                    random_expert_weights(p.num_experts, rows, cols, matrix_seed)))
               .first;
    }
    return *it->second;
  }

 private:
  std::string preset_;
  uint64_t seed_ = 0;
  std::map<Op, std::unique_ptr<ExpertWeights>> matrices_;
};

WeightCache& weight_cache() {
  static WeightCache cache;
  return cache;
}

constexpr int kDefaultCpuReps = 5;

// The llama.cpp-style layer: two MUL_MAT_IDs with the activation and the
// weighted combine as separate passes over memory.
struct UnfusedLayer {
  const ExpertWeights* gate_up;
  const ExpertWeights* down;
  ActivationParams act;
  const float* x;
  const int32_t* ids;
  const float* route_weights;
  int64_t tokens, top_k, hidden, ffn;
  CpuOptions opt;
  std::vector<float> gate_up_out, h, down_out;
  float* out;

  Status operator()() {
    MulMatIdArgs a;
    a.weights = gate_up->view();
    a.x = x;
    a.ids = ids;
    a.num_tokens = tokens;
    a.top_k = top_k;
    a.y = gate_up_out.data();
    NVFP4MOE_RETURN_IF_ERROR(mul_mat_id_cpu(a, opt));
    const int64_t pairs = tokens * top_k;
    for (int64_t r = 0; r < pairs; ++r) {
      const float* g = gate_up_out.data() + r * 2 * ffn;
      float* hr = h.data() + r * ffn;
      for (int64_t f = 0; f < ffn; ++f) hr[f] = apply_activation(act, g[f], g[ffn + f]);
    }
    MulMatIdArgs d;
    d.weights = down->view();
    d.x = h.data();
    d.x_per_slot = true;
    d.ids = ids;
    d.num_tokens = tokens;
    d.top_k = top_k;
    d.y = down_out.data();
    NVFP4MOE_RETURN_IF_ERROR(mul_mat_id_cpu(d, opt));
    for (int64_t t = 0; t < tokens; ++t) {
      float* o = out + t * hidden;
      std::fill(o, o + hidden, 0.0f);
      for (int64_t j = 0; j < top_k; ++j) {
        const float w = route_weights[t * top_k + j];
        const float* y = down_out.data() + (t * top_k + j) * hidden;
        for (int64_t i = 0; i < hidden; ++i) o[i] += w * y[i];
      }
    }
    return ok_status();
  }
};

}  // namespace

static Status run_case_cpu_unguarded(const BenchCase& c, int num_threads, BenchResult* out);

Status run_case_cpu(const BenchCase& c, int num_threads, BenchResult* out) {
  try {
    return run_case_cpu_unguarded(c, num_threads, out);
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, "out of host memory for the weights or activations");
  }
}

static Status run_case_cpu_unguarded(const BenchCase& c, int num_threads, BenchResult* out) {
  if (out == nullptr) return invalid_argument("run_case_cpu: out is null");
  const Preset& p = c.preset;
  if (c.tokens < 1) return invalid_argument("tokens = ", c.tokens, " must be at least 1");
  if (c.unfused && c.op != Op::kLayer) return invalid_argument("unfused applies to op layer only, not ", op_name(c.op));
  const std::vector<int32_t> ids = make_routing(c.routing, c.tokens, p.top_k, p.num_experts, c.seed);
  if (ids.empty()) {
    return invalid_argument("preset ", p.name, ": cannot route ", c.tokens, " tokens to top_k = ", p.top_k,
                            " of ", p.num_experts, " experts");
  }
  const CpuOptions opt{num_threads, c.schedule};
  const int64_t pairs = c.tokens * p.top_k;

  std::vector<float> x, y, route_weights;
  std::function<Status()> call;
  MulMatIdArgs mm;
  MoeLayerArgs layer;
  std::unique_ptr<UnfusedLayer> unfused;
  if (c.op == Op::kGateUp || c.op == Op::kDown) {
    const ExpertWeights& w = weight_cache().get(p, c.op, c.seed);
    // gate_up reads one row per token (broadcast to the k slots), down one
    // row per (token, slot), as in a real layer.
    mm.weights = w.view();
    mm.x_per_slot = c.op == Op::kDown;
    x = random_activations((mm.x_per_slot ? pairs : c.tokens) * w.cols, c.seed);
    y.resize(static_cast<size_t>(pairs * w.rows));
    mm.x = x.data();
    mm.ids = ids.data();
    mm.num_tokens = c.tokens;
    mm.top_k = p.top_k;
    mm.y = y.data();
    call = [&] { return mul_mat_id_cpu(mm, opt); };
  } else {
    const ExpertWeights& gate_up = weight_cache().get(p, Op::kGateUp, c.seed);
    const ExpertWeights& down = weight_cache().get(p, Op::kDown, c.seed);
    x = random_activations(c.tokens * p.hidden, c.seed);
    route_weights = random_route_weights(c.tokens, p.top_k, c.seed);
    y.resize(static_cast<size_t>(c.tokens * p.hidden));
    if (c.unfused) {
      unfused.reset(new UnfusedLayer{&gate_up, &down, ActivationParams{}, x.data(), ids.data(),
                                     route_weights.data(), c.tokens, p.top_k, p.hidden, p.ffn, opt,
                                     std::vector<float>(static_cast<size_t>(pairs * 2 * p.ffn)),
                                     std::vector<float>(static_cast<size_t>(pairs * p.ffn)),
                                     std::vector<float>(static_cast<size_t>(pairs * p.hidden)), y.data()});
      call = [&] { return (*unfused)(); };
    } else {
      layer.weights.gate_up = gate_up.view();
      layer.weights.down = down.view();
      layer.x = x.data();
      layer.ids = ids.data();
      layer.route_weights = route_weights.data();
      layer.num_tokens = c.tokens;
      layer.top_k = p.top_k;
      layer.out = y.data();
      call = [&] { return moe_layer_cpu(layer, opt); };
    }
  }

  // The warm-up call also validates everything, so the timed calls cannot fail
  // half-way through for a reason the first one would not have shown.
  NVFP4MOE_RETURN_IF_ERROR(call());
  const int reps = c.reps > 0 ? c.reps : kDefaultCpuReps;
  std::vector<double> us(static_cast<size_t>(reps));
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    NVFP4MOE_RETURN_IF_ERROR(call());
    const auto t1 = std::chrono::steady_clock::now();
    us[r] = std::chrono::duration<double, std::micro>(t1 - t0).count();
  }
  std::sort(us.begin(), us.end());
  BenchResult result;
  result.us_median = reps % 2 ? us[reps / 2] : 0.5 * (us[reps / 2 - 1] + us[reps / 2]);
  count_work(c, ids, &result.flops, &result.weight_bytes);
  *out = std::move(result);
  return ok_status();
}

}  // namespace nvfp4moe::bench
