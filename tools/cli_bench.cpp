// `nvfp4moe bench`: sweeps presets x ops x tokens x routings x schedules on
// one device, prints a llama-bench-style markdown table and optionally writes
// one JSON record per case.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "bench.hpp"
#include "cli_common.hpp"
#include "nvfp4moe/cuda.hpp"
#include "nvfp4moe/io.hpp"

namespace nvfp4moe::cli {

namespace {

using bench::BenchCase;
using bench::BenchResult;

constexpr const char* kCommand = "bench";

struct BenchOptions {
  std::vector<std::string> presets{"qwen3-30b-a3b"};
  std::vector<int64_t> tokens;    // default depends on the device
  std::vector<std::string> ops;  // default depends on the device
  std::vector<std::string> routings{"uniform"};
  std::vector<std::string> schedules{"compact"};
  std::string device = "auto";
  int threads = 0;
  int reps = 0;
  std::string json_path;
  bool unfused = false;
  std::string x_dtype = "auto";
  uint64_t seed = bench::kDefaultBenchSeed;
};

// The CPU default must finish in well under a minute on two cores; a GPU
// sweeps the whole range in about the same time.
const std::vector<int64_t> kCpuDefaultTokens = {1, 16, 128};
const std::vector<int64_t> kCudaDefaultTokens = {1, 16, 128, 512, 2048};
const std::vector<std::string> kCpuDefaultOps = {"gate_up"};
const std::vector<std::string> kCudaDefaultOps = {"gate_up", "down", "layer"};
constexpr int kCpuDefaultReps = 5;

std::string preset_list() {
  std::string s;
  for (const bench::Preset& p : bench::presets()) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "\n    %-14s E=%lld k=%lld hidden=%lld ffn=%lld", p.name.c_str(),
                  static_cast<long long>(p.num_experts), static_cast<long long>(p.top_k),
                  static_cast<long long>(p.hidden), static_cast<long long>(p.ffn));
    s += buf;
  }
  return s;
}

const char* schedule_label(Schedule s) { return s == Schedule::kRect ? "rect" : "compact"; }

std::string join(const std::vector<std::string>& items) {
  std::string s;
  for (const std::string& i : items) s += (s.empty() ? "" : ",") + i;
  return s;
}

std::string case_label(const BenchCase& c) {
  return c.preset.name + " " + bench::op_name(c.op) + (c.unfused ? " (unfused)" : "") + " T=" +
         std::to_string(c.tokens) + " " + c.routing.name() + " " + schedule_label(c.schedule);
}

// A markdown table whose columns are padded to their widest cell, counting
// UTF-8 code points (the "µs" header).
class Table {
 public:
  void add_column(std::string header, bool right_aligned) { columns_.push_back({std::move(header), right_aligned}); }
  void add_row(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }
  void print(FILE* f) const {
    std::vector<size_t> width(columns_.size());
    for (size_t i = 0; i < columns_.size(); ++i) {
      width[i] = std::max<size_t>(3, display_width(columns_[i].header));
      for (const auto& r : rows_) width[i] = std::max(width[i], display_width(r[i]));
    }
    std::vector<std::string> headers;
    for (const auto& c : columns_) headers.push_back(c.header);
    print_row(f, headers, width);
    std::string rule = "|";
    for (size_t i = 0; i < columns_.size(); ++i)
      rule += " " + std::string(width[i] - 1, '-') + (columns_[i].right_aligned ? ":" : "-") + " |";
    std::fprintf(f, "%s\n", rule.c_str());
    for (const auto& r : rows_) print_row(f, r, width);
  }

 private:
  struct Column {
    std::string header;
    bool right_aligned;
  };
  static size_t display_width(const std::string& s) {
    size_t n = 0;
    for (unsigned char ch : s) n += (ch & 0xC0) != 0x80;
    return n;
  }
  void print_row(FILE* f, const std::vector<std::string>& cells, const std::vector<size_t>& width) const {
    std::string line = "|";
    for (size_t i = 0; i < cells.size(); ++i) {
      const std::string pad(width[i] - display_width(cells[i]), ' ');
      line += " " + (columns_[i].right_aligned ? pad + cells[i] : cells[i] + pad) + " |";
    }
    std::fprintf(f, "%s\n", line.c_str());
  }
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string general(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

struct Done {
  BenchCase c;
  BenchResult r;
};

Status expand_cases(const BenchOptions& o, Device device, std::vector<BenchCase>* out) {
  std::vector<bench::Preset> presets;
  for (const std::string& name : o.presets) {
    if (name == "all") {
      presets.insert(presets.end(), bench::presets().begin(), bench::presets().end());
      continue;
    }
    const bench::Preset* p = bench::find_preset(name);
    if (p == nullptr) {
      std::string known;
      for (const bench::Preset& q : bench::presets()) known += (known.empty() ? "" : ", ") + q.name;
      return invalid_argument("--preset '", name, "' is not a preset; known: ", known, " (or all)");
    }
    presets.push_back(*p);
  }
  const std::vector<int64_t>& tokens =
      !o.tokens.empty() ? o.tokens : device == Device::kCuda ? kCudaDefaultTokens : kCpuDefaultTokens;
  for (int64_t t : tokens) {
    // T * k must fit int32 (plan.hpp); 1M tokens is far beyond any batch.
    if (t < 1 || t > (int64_t{1} << 20)) return invalid_argument("--tokens ", t, " is not in [1, 1048576]");
  }
  const std::vector<std::string>& op_names =
      !o.ops.empty() ? o.ops : device == Device::kCuda ? kCudaDefaultOps : kCpuDefaultOps;
  std::vector<bench::Op> ops;
  for (const std::string& s : op_names) {
    bench::Op op;
    NVFP4MOE_RETURN_IF_ERROR(bench::parse_op(s, &op));
    ops.push_back(op);
  }
  if (o.unfused && std::find(ops.begin(), ops.end(), bench::Op::kLayer) == ops.end())
    return invalid_argument("--unfused applies to --op layer only; the ops given are ", join(op_names));
  std::vector<bench::Routing> routings;
  for (const std::string& s : o.routings) {
    bench::Routing r;
    NVFP4MOE_RETURN_IF_ERROR(bench::parse_routing(s, &r));
    routings.push_back(r);
  }
  std::vector<Schedule> schedules;
  for (const std::string& s : o.schedules) {
    Schedule sc;
    NVFP4MOE_RETURN_IF_ERROR(bench::parse_schedule(s, &sc));
    schedules.push_back(sc);
  }
  if (o.threads < 0) return invalid_argument("--threads ", o.threads, " must be >= 0 (0 = all hardware threads)");
  if (o.reps < 0) return invalid_argument("--reps ", o.reps, " must be >= 1");
  DType x_dtype = device == Device::kCpu ? DType::kF32 : DType::kBF16;
  if (o.x_dtype == "f32") x_dtype = DType::kF32;
  else if (o.x_dtype == "bf16") x_dtype = DType::kBF16;
  else if (o.x_dtype != "auto") return invalid_argument("--x-dtype '", o.x_dtype, "' is not auto, bf16 or f32");
  if (device == Device::kCpu && x_dtype != DType::kF32)
    return invalid_argument("--x-dtype bf16: the CPU bench times F32 activations only");

  // Presets outermost, so each preset's weights are generated once and freed
  // before the next preset's.
  for (const bench::Preset& p : presets)
    for (bench::Op op : ops)
      for (int64_t t : tokens)
        for (const bench::Routing& r : routings)
          for (Schedule sc : schedules) {
            BenchCase c;
            c.preset = p;
            c.op = op;
            c.tokens = t;
            c.routing = r;
            c.schedule = sc;
            c.unfused = o.unfused && op == bench::Op::kLayer;
            c.x_dtype = x_dtype;
            c.reps = o.reps > 0 ? o.reps : device == Device::kCpu ? kCpuDefaultReps : 0;
            c.seed = o.seed;
            out->push_back(c);
          }
  return ok_status();
}

nlohmann::ordered_json record(const Done& d, const std::string& device, const std::string& device_name, int threads,
                      const std::string& commit, const std::string& date) {
  const BenchCase& c = d.c;
  const BenchResult& r = d.r;
  nlohmann::ordered_json j = {
      {"device", device},
      {"device_name", device_name},
      {"commit", commit},
      {"date", date},
      {"command_line", command_line()},
      {"preset", c.preset.name},
      {"num_experts", c.preset.num_experts},
      {"top_k", c.preset.top_k},
      {"hidden", c.preset.hidden},
      {"ffn", c.preset.ffn},
      {"op", bench::op_name(c.op)},
      {"unfused", c.unfused},
      {"tokens", c.tokens},
      {"routing", c.routing.name()},
      {"schedule", schedule_label(c.schedule)},
      {"x_dtype", c.x_dtype == DType::kF32 ? "f32" : "bf16"},
      {"seed", c.seed},
      {"reps", c.reps},
      {"us", r.us_median},
      {"tflops", r.tflops()},
      {"gbps", r.gbps()},
      {"tokens_per_s", r.tokens_per_s(c.tokens)},
      {"flops", r.flops},
      {"weight_bytes", r.weight_bytes},
  };
  if (device == "cpu") j["threads"] = threads;
  for (const auto& [name, value] : r.extra) j[j.contains(name) ? "extra_" + name : name] = value;
  return j;
}

int run_bench(const BenchOptions& o) {
  Device requested, device;
  Status s = parse_device(o.device, &requested);
  if (s.ok()) s = resolve_device(requested, &device);
  if (!s.ok()) return fail(kCommand, s);
  std::vector<BenchCase> cases;
  s = expand_cases(o, device, &cases);
  if (!s.ok()) return fail(kCommand, s);

  const bool cuda = device == Device::kCuda;
  std::string device_name;
  int threads = 0;
  if (cuda) {
    cuda::DeviceInfo info;
    device_name = cuda::device_info(0, &info).ok() ? info.name : "unknown GPU";
  } else {
    const CpuFacts cpu = cpu_facts();
    device_name = cpu.model;
    threads = o.threads > 0 ? o.threads : cpu.usable_threads;
  }
  const std::string commit = build_commit();
  const std::string date = utc_now_iso8601();

  std::vector<Done> done;
  Status failure;
  for (size_t i = 0; i < cases.size();) {
    // On the GPU, the cases of one preset, op and T (its routings and
    // schedules, adjacent in `cases`) are timed in turns.
    size_t end = i + 1;
    if (cuda)
      while (end < cases.size() && bench::same_timing_group(cases[end], cases[i])) ++end;
    std::vector<BenchCase> group(cases.begin() + std::ptrdiff_t(i), cases.begin() + std::ptrdiff_t(end));
    std::vector<BenchResult> results(group.size());
    s = cuda ? bench::run_cases_cuda(group, &results) : bench::run_case_cpu(group[0], threads, &results[0]);
    if (!s.ok()) {
      failure = make_status(s.code(), case_label(group[0]), group.size() > 1 ? " (and its group)" : "", ": ",
                            s.message());
      break;
    }
    // Each runner counts the work of the calls it timed: the CPU runner times
    // the seed's routing, the CUDA runner cycles through several.
    for (size_t j = 0; j < group.size(); ++j, ++i) {
      std::fprintf(stderr, "bench: [%zu/%zu] %s: %.2f us\n", i + 1, cases.size(), case_label(group[j]).c_str(),
                   results[j].us_median);
      done.push_back({group[j], results[j]});
    }
  }

  Table table;
  for (const char* h : {"preset", "op", "tokens", "routing", "schedule"}) table.add_column(h, h == std::string("tokens"));
  for (const char* h : {"time (µs, median)", "TFLOP/s", "GB/s", "tokens/s"}) table.add_column(h, true);
  std::vector<std::string> extra_names;
  for (const Done& d : done)
    for (const auto& [name, value] : d.r.extra)
      if (std::find(extra_names.begin(), extra_names.end(), name) == extra_names.end()) extra_names.push_back(name);
  for (const std::string& name : extra_names) table.add_column(name, true);
  for (const Done& d : done) {
    std::vector<std::string> row = {d.c.preset.name,
                                    std::string(bench::op_name(d.c.op)) + (d.c.unfused ? " (unfused)" : ""),
                                    std::to_string(d.c.tokens),
                                    d.c.routing.name(),
                                    schedule_label(d.c.schedule),
                                    fixed(d.r.us_median, 2),
                                    fixed(d.r.tflops(), 3),
                                    fixed(d.r.gbps(), 1),
                                    fixed(d.r.tokens_per_s(d.c.tokens), 0)};
    for (const std::string& name : extra_names) {
      std::string cell;
      for (const auto& [n, v] : d.r.extra)
        if (n == name) cell = general(v);
      row.push_back(cell);
    }
    table.add_row(std::move(row));
  }
  if (!done.empty()) {
    table.print(stdout);
    std::printf("\n%s: %s%s, %s activations, commit %s\n", cuda ? "cuda" : "cpu", device_name.c_str(),
                cuda ? "" : (", " + std::to_string(threads) + " threads").c_str(),
                done[0].c.x_dtype == DType::kF32 ? "F32" : "BF16", commit.c_str());
    std::fflush(stdout);
  }
  if (!failure.ok()) return fail(kCommand, failure);

  if (!o.json_path.empty()) {
    nlohmann::ordered_json records = nlohmann::ordered_json::array();
    for (const Done& d : done) records.push_back(record(d, cuda ? "cuda" : "cpu", device_name, threads, commit, date));
    const std::string text = records.dump(2) + "\n";
    s = io::write_file_atomic(o.json_path, text.data(), text.size());
    if (!s.ok()) return fail(kCommand, make_status(s.code(), "--json: ", s.message()));
    std::fprintf(stderr, "bench: wrote %zu records to %s\n", done.size(), o.json_path.c_str());
  }
  return 0;
}

}  // namespace

Command add_bench_command(CLI::App& app) {
  auto o = std::make_shared<BenchOptions>();
  CLI::App* sub =
      app.add_subcommand("bench", "Time MUL_MAT_ID and the MoE layer on random NVFP4 weights of real model shapes");
  sub->footer(
      "Lists are comma-separated; every combination is run. Defaults on the CPU: qwen3-30b-a3b, op gate_up, tokens "
      "1,16,128; on a GPU: ops gate_up,down,layer, tokens 1,16,128,512,2048. The table goes to stdout, progress to "
      "stderr.");
  sub->add_option("--preset", o->presets, "Model shapes (or 'all'):" + preset_list())
      ->delimiter(',')
      ->default_str("qwen3-30b-a3b");
  sub->add_option("--tokens,-t", o->tokens, "Tokens T per call (list)")->delimiter(',');
  sub->add_option("--op", o->ops, "gate_up (N=2*ffn, K=hidden, one x row per token), down (N=hidden, K=ffn, one "
                                  "row per token and slot), layer (gate, up, SwiGLU, down, weighted sum) (list)")
      ->delimiter(',');
  sub->add_option("--routing", o->routings, "uniform | balanced (every expert T*k/E pairs, +-1) | zipf:S (expert rank r chosen with p ~ 1/r^S) (list)")
      ->delimiter(',')
      ->default_str("uniform");
  sub->add_option("--schedule", o->schedules, "compact (only real tiles) | rect (every expert x max tiles) (list)")
      ->delimiter(',')
      ->default_str("compact");
  sub->add_option("--device", o->device, "auto (cuda when a device is present) | cpu | cuda")->default_str("auto");
  sub->add_option("--threads", o->threads, "CPU threads (0 = all usable)")->default_str("0");
  sub->add_option("--reps", o->reps, "Timed calls per case, median reported (default 5 on the CPU; the CUDA "
                                     "runner chooses its own)");
  sub->add_option("--json", o->json_path, "Write one JSON record per case to this file");
  sub->add_flag("--unfused", o->unfused, "Layer only: the llama.cpp-style baseline (separate matmuls, "
                                         "activation and combine passes)");
  sub->add_option("--x-dtype", o->x_dtype,
                  "Activations given to the op: auto (BF16 on a GPU, F32 on the CPU) | bf16 | f32 (GPU: what ggml "
                  "passes; the op converts it)")
      ->default_str("auto");
  sub->add_option("--seed", o->seed, "Seed of the routing, weights and activations")
      ->default_str(std::to_string(bench::kDefaultBenchSeed));
  return {sub, [o] { return run_bench(*o); }};
}

}  // namespace nvfp4moe::cli
