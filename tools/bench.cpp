// Bench helpers shared by the front end and the runners: presets, routing
// generation, parsing, work counting and random inputs.
#include "bench.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace nvfp4moe::bench {

namespace {

// splitmix64: tiny, fast and fully specified, so routings and weights are the
// same on every platform and standard library (std::uniform_*_distribution is
// implementation-defined).
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n), n > 0 (rejection keeps it unbiased).
  uint64_t below(uint64_t n) {
    const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t x;
    do x = next();
    while (x >= limit);
    return x % n;
  }
};

// Independent streams for (seed, purpose, index).
uint64_t stream_seed(uint64_t seed, uint64_t purpose, uint64_t index) {
  SplitMix64 m{seed ^ (purpose * 0xD1B54A32D192ED03ull)};
  m.state += index * 0x8CB92BA72F3D8DD7ull;
  return m.next();
}

enum Purpose : uint64_t {
  kRoutingStream = 1,
  kZipfRanks = 2,
  kWeightChunk = 3,
  kActivations = 4,
  kRouteWeights = 5,
  kBalancedOrder = 6
};

std::vector<int32_t> uniform_routing(int64_t num_tokens, int64_t top_k, int64_t num_experts, uint64_t seed) {
  std::vector<int32_t> ids(static_cast<size_t>(num_tokens * top_k));
  std::vector<int32_t> pool(static_cast<size_t>(num_experts));
  for (int64_t e = 0; e < num_experts; ++e) pool[e] = static_cast<int32_t>(e);
  SplitMix64 rng{stream_seed(seed, kRoutingStream, 0)};
  // A partial Fisher-Yates shuffle per token. The pool is not reset between
  // tokens: from any permutation, the first k picks are a uniform k-subset.
  for (int64_t t = 0; t < num_tokens; ++t) {
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t pick = j + static_cast<int64_t>(rng.below(static_cast<uint64_t>(num_experts - j)));
      std::swap(pool[j], pool[pick]);
      ids[t * top_k + j] = pool[j];
    }
  }
  return ids;
}

// 0 .. n-1 in the order of a Fisher-Yates shuffle drawn from rng.
std::vector<int32_t> shuffled_indices(int64_t n, SplitMix64& rng) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int32_t>(i);
  for (int64_t i = n - 1; i > 0; --i) std::swap(v[i], v[rng.below(static_cast<uint64_t>(i + 1))]);
  return v;
}

// Pair p = t * k + j of a token order goes to expert perm[p % E]: each
// expert floor or ceil of T * k / E pairs, a token's k experts distinct
// (k consecutive residues, k <= E). Which experts and which tokens meet is
// drawn from the seed, so an expert's rows are scattered over X as under
// the other routings.
std::vector<int32_t> balanced_routing(int64_t num_tokens, int64_t top_k, int64_t num_experts, uint64_t seed) {
  SplitMix64 rng{stream_seed(seed, kBalancedOrder, 0)};
  const std::vector<int32_t> expert = shuffled_indices(num_experts, rng);
  const std::vector<int32_t> token = shuffled_indices(num_tokens, rng);
  std::vector<int32_t> ids(static_cast<size_t>(num_tokens * top_k));
  for (int64_t i = 0; i < num_tokens; ++i)
    for (int64_t j = 0; j < top_k; ++j) ids[int64_t(token[i]) * top_k + j] = expert[(i * top_k + j) % num_experts];
  return ids;
}

std::vector<int32_t> zipf_routing(double s, int64_t num_tokens, int64_t top_k, int64_t num_experts, uint64_t seed) {
  // Which expert has popularity rank r is itself random, so hot experts are
  // not simply the lowest ids (which would flatter memory locality).
  SplitMix64 rank_rng{stream_seed(seed, kZipfRanks, 0)};
  const std::vector<int32_t> expert_of_rank = shuffled_indices(num_experts, rank_rng);

  std::vector<double> weight(static_cast<size_t>(num_experts));
  double total = 0;
  for (int64_t r = 0; r < num_experts; ++r) total += weight[r] = std::pow(static_cast<double>(r + 1), -s);

  std::vector<int32_t> ids(static_cast<size_t>(num_tokens * top_k));
  std::vector<char> taken(static_cast<size_t>(num_experts));
  SplitMix64 rng{stream_seed(seed, kRoutingStream, 1)};
  std::vector<int64_t> picked;
  for (int64_t t = 0; t < num_tokens; ++t) {
    // Sequential draws without replacement: each slot picks among the ranks
    // not yet taken, with probability proportional to 1 / r^s.
    double remaining = total;
    picked.clear();
    for (int64_t j = 0; j < top_k; ++j) {
      const double u = rng.uniform() * remaining;
      double acc = 0;
      int64_t choice = -1;
      for (int64_t r = 0; r < num_experts; ++r) {
        if (taken[r]) continue;
        choice = r;  // falls back to the last free rank if rounding overshoots
        acc += weight[r];
        if (u < acc) break;
      }
      taken[choice] = 1;
      picked.push_back(choice);
      remaining -= weight[choice];
      ids[t * top_k + j] = expert_of_rank[choice];
    }
    for (int64_t r : picked) taken[r] = 0;
  }
  return ids;
}

}  // namespace

const std::vector<Preset>& presets() {
  static const std::vector<Preset> kPresets = {
      {"qwen3-30b-a3b", 128, 8, 2048, 768},
      {"gpt-oss-20b", 32, 4, 2880, 2880},
      {"gpt-oss-120b", 128, 4, 2880, 2880},
      {"deepseek-v3", 256, 8, 7168, 2048},
      {"mixtral-8x7b", 8, 2, 4096, 14336},
  };
  return kPresets;
}

const Preset* find_preset(const std::string& name) {
  for (const Preset& p : presets())
    if (p.name == name) return &p;
  return nullptr;
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kGateUp: return "gate_up";
    case Op::kDown: return "down";
    case Op::kLayer: return "layer";
  }
  return "?";
}

std::string Routing::name() const {
  if (balanced) return "balanced";
  if (!zipf) return "uniform";
  char buf[48];
  std::snprintf(buf, sizeof buf, "zipf%g", zipf_s);
  return buf;
}

Status parse_op(const std::string& text, Op* out) {
  for (Op op : {Op::kGateUp, Op::kDown, Op::kLayer}) {
    if (text == op_name(op)) {
      *out = op;
      return ok_status();
    }
  }
  return invalid_argument("--op '", text, "' is not one of gate_up, down, layer");
}

Status parse_schedule(const std::string& text, Schedule* out) {
  if (text == "compact") {
    *out = Schedule::kCompact;
  } else if (text == "rect") {
    *out = Schedule::kRect;
  } else {
    return invalid_argument("--schedule '", text, "' is not one of compact, rect");
  }
  return ok_status();
}

Status parse_routing(const std::string& text, Routing* out) {
  if (text == "uniform") {
    *out = Routing{};
    return ok_status();
  }
  if (text == "balanced") {
    *out = Routing{};
    out->balanced = true;
    return ok_status();
  }
  // "zipf:S" on the command line; "zipfS" (Routing::name) is accepted too.
  if (text.rfind("zipf", 0) == 0) {
    std::string exponent = text.substr(4);
    if (!exponent.empty() && exponent[0] == ':') exponent.erase(0, 1);
    char* end = nullptr;
    const double s = exponent.empty() ? NAN : std::strtod(exponent.c_str(), &end);
    if (exponent.empty() || end != exponent.c_str() + exponent.size() || !std::isfinite(s) || s <= 0 || s > 16) {
      return invalid_argument("--routing '", text, "': the zipf exponent must be a number in (0, 16], e.g. zipf:1.2");
    }
    *out = Routing{};
    out->zipf = true;
    out->zipf_s = s;
    return ok_status();
  }
  return invalid_argument("--routing '", text, "' is not 'uniform', 'balanced' or 'zipf:S' (e.g. zipf:1.2)");
}

std::vector<int32_t> make_routing(const Routing& r, int64_t num_tokens, int64_t top_k, int64_t num_experts,
                                  uint64_t seed) {
  // Callers check the shape; an impossible one (k > E would loop forever
  // looking for distinct experts) gives no ids rather than a hang.
  if (num_tokens < 0 || top_k < 1 || num_experts < 1 || top_k > num_experts || num_experts > INT32_MAX) return {};
  if (r.balanced) return balanced_routing(num_tokens, top_k, num_experts, seed);
  if (r.zipf) return zipf_routing(r.zipf_s, num_tokens, top_k, num_experts, seed);
  return uniform_routing(num_tokens, top_k, num_experts, seed);
}

void op_shape(const Preset& p, Op op, int64_t* rows, int64_t* cols) {
  if (op == Op::kDown) {
    *rows = p.hidden;
    *cols = p.ffn;
  } else {
    *rows = 2 * p.ffn;
    *cols = p.hidden;
  }
}

bool same_timing_group(const BenchCase& a, const BenchCase& b) {
  return a.preset.name == b.preset.name && a.op == b.op && a.tokens == b.tokens && a.unfused == b.unfused &&
         a.reps == b.reps && a.x_dtype == b.x_dtype;
}

int interleave_step(int cases, int rotations) {
  // Inside a round consecutive calls differ by `step`; from a round's last
  // call to the next round's first by 1 - (cases - 1) * step.
  int step = 1;
  while (step < rotations - 1 && cases > 1 && ((cases - 1) * step - 1) % rotations == 0) ++step;
  return step;
}

void count_work(const BenchCase& c, const std::vector<int32_t>& ids, double* flops, double* weight_bytes) {
  const Preset& p = c.preset;
  std::vector<char> hit(static_cast<size_t>(std::max<int64_t>(p.num_experts, 0)));
  int64_t experts_hit = 0;
  for (int32_t e : ids) {
    if (e < 0 || e >= p.num_experts || hit[e]) continue;
    hit[e] = 1;
    ++experts_hit;
  }
  const double pairs = static_cast<double>(c.tokens) * static_cast<double>(p.top_k);
  // NVFP4 bytes of one N x K matrix: K/2 code bytes and K/16 scale bytes per row.
  auto matrix_bytes = [](int64_t n, int64_t k) { return static_cast<double>(n) * (k / 2 + k / kScaleBlock); };
  const double gate_up_flops = 2.0 * pairs * (2.0 * p.ffn) * p.hidden;
  const double down_flops = 2.0 * pairs * p.hidden * p.ffn;
  const double gate_up_bytes = matrix_bytes(2 * p.ffn, p.hidden);
  const double down_bytes = matrix_bytes(p.hidden, p.ffn);
  switch (c.op) {
    case Op::kGateUp:
      *flops = gate_up_flops;
      *weight_bytes = experts_hit * gate_up_bytes;
      break;
    case Op::kDown:
      *flops = down_flops;
      *weight_bytes = experts_hit * down_bytes;
      break;
    case Op::kLayer:
      *flops = gate_up_flops + down_flops;
      *weight_bytes = experts_hit * (gate_up_bytes + down_bytes);
      break;
  }
}

ExpertWeights random_expert_weights(int64_t num_experts, int64_t rows, int64_t cols, uint64_t seed) {
  ExpertWeights w;
  w.num_experts = num_experts;
  w.rows = rows;
  w.cols = cols;
  w.codes.resize(static_cast<size_t>(num_experts * rows * (cols / 2)));
  w.scales.resize(static_cast<size_t>(num_experts * rows * (cols / kScaleBlock)));
  w.alpha.assign(static_cast<size_t>(num_experts), 1.0f / 64);

  // Fixed-size chunks, each from its own stream: the bytes do not depend on
  // how many threads fill them.
  constexpr size_t kChunk = size_t{1} << 20;
  const size_t code_chunks = (w.codes.size() + kChunk - 1) / kChunk;
  const size_t scale_chunks = (w.scales.size() + kChunk - 1) / kChunk;
  auto fill_chunk = [&](size_t c) {
    if (c < code_chunks) {
      SplitMix64 rng{stream_seed(seed, kWeightChunk, c)};
      uint8_t* p = w.codes.data() + c * kChunk;
      const size_t n = std::min(kChunk, w.codes.size() - c * kChunk);
      size_t i = 0;
      for (; i + 8 <= n; i += 8) {
        const uint64_t v = rng.next();
        std::memcpy(p + i, &v, 8);
      }
      for (; i < n; ++i) p[i] = static_cast<uint8_t>(rng.next());
    } else {
      const size_t sc = c - code_chunks;
      SplitMix64 rng{stream_seed(seed, kWeightChunk, (uint64_t{1} << 40) + sc)};
      uint8_t* p = w.scales.data() + sc * kChunk;
      const size_t n = std::min(kChunk, w.scales.size() - sc * kChunk);
      for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(0x28 + (rng.next() >> 32) % 0x21);
    }
  };
  const size_t total_chunks = code_chunks + scale_chunks;
  const size_t num_threads =
      std::max<size_t>(1, std::min<size_t>(std::thread::hardware_concurrency(), total_chunks));
  std::vector<std::thread> threads;
  for (size_t t = 0; t < num_threads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t c = t; c < total_chunks; c += num_threads) fill_chunk(c);
    });
  }
  for (auto& th : threads) th.join();
  return w;
}

std::vector<float> random_activations(int64_t count, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(std::max<int64_t>(count, 0)));
  SplitMix64 rng{stream_seed(seed, kActivations, 0)};
  for (float& x : v) x = static_cast<float>(2.0 * rng.uniform() - 1.0);
  return v;
}

std::vector<float> random_route_weights(int64_t num_tokens, int64_t top_k, uint64_t seed) {
  std::vector<float> w(static_cast<size_t>(std::max<int64_t>(num_tokens * top_k, 0)));
  SplitMix64 rng{stream_seed(seed, kRouteWeights, 0)};
  for (int64_t t = 0; t < num_tokens; ++t) {
    float* row = w.data() + t * top_k;
    double sum = 0;
    for (int64_t j = 0; j < top_k; ++j) sum += row[j] = static_cast<float>(0.05 + rng.uniform());
    for (int64_t j = 0; j < top_k; ++j) row[j] = static_cast<float>(row[j] / sum);
  }
  return w;
}

}  // namespace nvfp4moe::bench
