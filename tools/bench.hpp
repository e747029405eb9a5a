// `nvfp4moe bench`: cases, results, and the per-device runners.
//
// The CLI front end (tools/bench.cpp) expands presets x ops x T x routing x
// schedule into BenchCases, calls the runner of the chosen device for each
// (on the GPU, for each group of cases timed in turns), and prints / writes
// the results. Runners: tools/bench_cpu.cpp and
// tools/bench_cuda.cpp (the latter only in CUDA builds).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nvfp4moe/ops.hpp"
#include "nvfp4moe/status.hpp"

namespace nvfp4moe::bench {

struct Preset {
  std::string name;
  int64_t num_experts, top_k, hidden, ffn;
};
// qwen3-30b-a3b, gpt-oss-20b, gpt-oss-120b, deepseek-v3, mixtral-8x7b.
const std::vector<Preset>& presets();
const Preset* find_preset(const std::string& name);

enum class Op { kGateUp, kDown, kLayer };
const char* op_name(Op op);

struct Routing {
  bool zipf = false;
  double zipf_s = 0.0;  // popularity of expert rank r ~ 1 / r^s
  // Every expert gets floor or ceil of T * k / E pairs: the job list's
  // tiles without the remainders that uniform routing's spread leaves.
  bool balanced = false;
  std::string name() const;  // "uniform", "zipf1.2" or "balanced"
};

// Top-k distinct experts per token; deterministic for a seed.
std::vector<int32_t> make_routing(const Routing& r, int64_t num_tokens, int64_t top_k, int64_t num_experts,
                                  uint64_t seed);

inline constexpr uint64_t kDefaultBenchSeed = 20250101;

struct BenchCase {
  Preset preset;
  Op op;
  int64_t tokens;
  Routing routing;
  Schedule schedule;
  bool unfused = false;  // layer only: the llama.cpp-style baseline
  // Activations handed to the op: the CUDA runner takes BF16 (default) or
  // F32 (what ggml passes; the op converts it), the CPU runner F32.
  DType x_dtype = DType::kBF16;
  // Timed calls whose median is reported; 0 = the runner's own choice (the
  // CUDA runner may time on its own terms and ignore it).
  int reps = 0;
  // Seed of everything random in the case: the routing is
  // make_routing(routing, tokens, preset.top_k, preset.num_experts, seed), so
  // every runner and the front end see the same ids.
  uint64_t seed = kDefaultBenchSeed;
};

struct BenchResult {
  double us_median = 0;      // per call
  double flops = 0;          // 2 * rows * N * K summed over the op's matmuls
  double weight_bytes = 0;   // NVFP4 bytes of the experts hit (mean over the routings timed)
  double tflops() const { return us_median > 0 ? flops / us_median * 1e-6 : 0; }
  double gbps() const { return us_median > 0 ? weight_bytes / us_median * 1e-3 : 0; }
  double tokens_per_s(int64_t tokens) const { return us_median > 0 ? tokens / us_median * 1e6 : 0; }
  // Optional extra columns (name, value), e.g. peers and roofline fraction.
  std::vector<std::pair<std::string, double>> extra;
};

// Parsers of the command-line spellings: "gate_up" | "down" | "layer",
// "compact" | "rect", "uniform" | "zipf:S" (S > 0). Errors name the value.
Status parse_op(const std::string& text, Op* out);
Status parse_schedule(const std::string& text, Schedule* out);
Status parse_routing(const std::string& text, Routing* out);

// The matmul shape of a single-matmul op (gate_up: N = 2F, K = H;
// down: N = H, K = F). Layer runs both.
void op_shape(const Preset& p, Op op, int64_t* rows, int64_t* cols);

// Inputs for timing, deterministic for a seed whatever the thread count.
// Weights: random code bytes, scale bytes in [0x28, 0x48] (UE4M3 0.25 .. 4)
// and alpha 1/64, so outputs stay finite and of moderate size; generating
// them is a memory-speed fill, unlike quantizing random floats.
ExpertWeights random_expert_weights(int64_t num_experts, int64_t rows, int64_t cols, uint64_t seed);
// Uniform in [-1, 1).
std::vector<float> random_activations(int64_t count, uint64_t seed);
// [T][k], positive, each token's k weights sum to 1.
std::vector<float> random_route_weights(int64_t num_tokens, int64_t top_k, uint64_t seed);

// FLOPs and hit-expert NVFP4 bytes of one case for the given ids.
void count_work(const BenchCase& c, const std::vector<int32_t>& ids, double* flops, double* weight_bytes);

// The GPU runner times a group of `cases` cases in rounds, round i running
// case j on input rotation (i + j * step) % rotations. This step makes no two
// consecutive calls share a rotation (the second would find the first's
// weights in L2) while each case still cycles through every rotation.
int interleave_step(int cases, int rotations);

Status run_case_cpu(const BenchCase& c, int num_threads, BenchResult* out);
// Whether two cases differ only in routing and schedule (same preset, op,
// T, unfused and reps), so that the GPU runner may time them in turns.
bool same_timing_group(const BenchCase& a, const BenchCase& b);
// Cases of one timing group, their main timings taken in turns so that the
// ratios between them (Zipf against uniform, compact against rect) see one
// power state; (*out)[i] is group[i]'s result. Available only when built
// with CUDA; otherwise returns kUnsupported.
Status run_cases_cuda(const std::vector<BenchCase>& group, std::vector<BenchResult>* out);

}  // namespace nvfp4moe::bench
