// Shared pieces of the `nvfp4moe` subcommands: registration, error reporting,
// progress, device choice and facts about the machine and the build.
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "nvfp4moe/status.hpp"

namespace nvfp4moe::cli {

// A registered subcommand: main() runs the one CLI11 parsed.
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};

Command add_info_command(CLI::App& app);
Command add_bench_command(CLI::App& app);
Command add_inspect_command(CLI::App& app);
Command add_dequant_command(CLI::App& app);
Command add_matmul_id_command(CLI::App& app);
Command add_run_command(CLI::App& app);
Command add_quantize_command(CLI::App& app);

inline constexpr int kExitFailure = 1;

// Prints "nvfp4moe <command>: error: <message>" on stderr and returns
// kExitFailure, so callers can `return fail(...)`.
int fail(const std::string& command, const Status& s);
int fail(const std::string& command, const std::string& message);
void note(const std::string& command, const std::string& message);  // "nvfp4moe <command>: <message>"

// The whole command line as typed (arguments quoted where the shell needs it).
void set_command_line(int argc, char** argv);
const std::string& command_line();

// Build-time commit (short hash, "-dirty" when the tree had changes; "unknown"
// outside a git checkout) and the current UTC time, ISO 8601.
std::string build_commit();
std::string build_version();  // project version, "0.1.0"
std::string utc_now_iso8601();

struct CpuFacts {
  std::string model;  // /proc/cpuinfo "model name", or "unknown"
  bool avx2 = false, fma = false, avx512f = false, avx512bw = false, avx512bf16 = false;
  int hardware_threads = 0;  // std::thread::hardware_concurrency
  int usable_threads = 0;    // CPUs in this process's affinity mask
};
CpuFacts cpu_facts();

enum class Device { kAuto, kCpu, kCuda };
Status parse_device(const std::string& text, Device* out);
// kAuto becomes kCuda when a device is present (and, in CUDA builds, one the
// kernels support), else kCpu. kCuda without a
// device (or without CUDA in the build) is an error saying which.
Status resolve_device(Device requested, Device* out);

// Progress on stderr for long loads and conversions: at most a few lines a
// second, and only when a step takes long enough for anyone to wonder.
class Progress {
 public:
  Progress(std::string command, std::string what, int64_t total);
  void update(int64_t done);
  void finish();

 private:
  std::string command_, what_;
  int64_t total_;
  std::chrono::steady_clock::time_point start_, last_;
  bool shown_ = false;
};

// "1.5 GB", "12 MB", "512 B".
std::string human_bytes(double bytes);
// "[4, 128, 2048]".
std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace nvfp4moe::cli
