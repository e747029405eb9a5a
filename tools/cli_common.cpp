#include "cli_common.hpp"

#include <sched.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <thread>

#include "nvfp4moe/cuda.hpp"
#include "nvfp4moe_build_info.hpp"

namespace nvfp4moe::cli {

int fail(const std::string& command, const Status& s) { return fail(command, s.to_string()); }

int fail(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "nvfp4moe %s: error: %s\n", command.c_str(), message.c_str());
  return kExitFailure;
}

void note(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "nvfp4moe %s: %s\n", command.c_str(), message.c_str());
}

namespace {
std::string& command_line_storage() {
  static std::string s;
  return s;
}

std::string shell_quoted(const std::string& arg) {
  const bool plain = !arg.empty() && arg.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                                           "0123456789-_=.,:/+@%") == std::string::npos;
  if (plain) return arg;
  std::string q = "'";
  for (char c : arg) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}
}  // namespace

void set_command_line(int argc, char** argv) {
  std::string s;
  for (int i = 0; i < argc; ++i) {
    if (i) s += ' ';
    s += shell_quoted(argv[i]);
  }
  command_line_storage() = s;
}

const std::string& command_line() { return command_line_storage(); }

std::string build_commit() { return NVFP4MOE_GIT_COMMIT; }
std::string build_version() { return NVFP4MOE_VERSION; }

std::string utc_now_iso8601() {
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  gmtime_r(&now, &utc);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buf;
}

CpuFacts cpu_facts() {
  CpuFacts f;
  f.model = "unknown";
  std::ifstream cpuinfo("/proc/cpuinfo");
  for (std::string line; std::getline(cpuinfo, line);) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos && colon + 2 <= line.size()) f.model = line.substr(colon + 2);
      break;
    }
  }
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  f.avx2 = __builtin_cpu_supports("avx2");
  f.fma = __builtin_cpu_supports("fma");
  f.avx512f = __builtin_cpu_supports("avx512f");
  f.avx512bw = __builtin_cpu_supports("avx512bw");
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 12
  f.avx512bf16 = __builtin_cpu_supports("avx512bf16");
#endif
#endif
  f.hardware_threads = static_cast<int>(std::thread::hardware_concurrency());
  cpu_set_t set;
  CPU_ZERO(&set);
  f.usable_threads = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : f.hardware_threads;
  return f;
}

Status parse_device(const std::string& text, Device* out) {
  if (text == "auto") {
    *out = Device::kAuto;
  } else if (text == "cpu") {
    *out = Device::kCpu;
  } else if (text == "cuda") {
    *out = Device::kCuda;
  } else {
    return invalid_argument("--device '", text, "' is not one of auto, cpu, cuda");
  }
  return ok_status();
}

Status resolve_device(Device requested, Device* out) {
  namespace nc = nvfp4moe::cuda;
  if (requested == Device::kCpu) {
    *out = Device::kCpu;
    return ok_status();
  }
  const int devices = nc::device_count();
  if (requested == Device::kAuto) {
    *out = devices > 0 ? Device::kCuda : Device::kCpu;
#if defined(NVFP4MOE_WITH_CUDA)
    // A GPU the kernels cannot run on (not sm_90) is no reason to fail.
    if (devices > 0) {
      const Status supported = nc::check_device_supported(0);
      if (!supported.ok()) {
        std::fprintf(stderr, "nvfp4moe: --device auto: using the CPU (%s)\n", supported.message().c_str());
        *out = Device::kCpu;
      }
    }
#endif
    return ok_status();
  }
  if (!nc::built_with_cuda()) {
    return make_status(StatusCode::kUnsupported,
                       "--device cuda: this nvfp4moe was built without CUDA (configure with -DNVFP4MOE_CUDA=ON "
                       "and nvcc on the PATH)");
  }
  if (devices == 0) return make_status(StatusCode::kNoDevice, "--device cuda: no CUDA device found");
  *out = Device::kCuda;
  return ok_status();
}

Progress::Progress(std::string command, std::string what, int64_t total)
    : command_(std::move(command)), what_(std::move(what)), total_(total),
      start_(std::chrono::steady_clock::now()), last_(start_) {}

void Progress::update(int64_t done) {
  const auto now = std::chrono::steady_clock::now();
  // Quiet for the first second; then one line every two seconds at most.
  if (now - start_ < std::chrono::seconds(1) || (shown_ && now - last_ < std::chrono::seconds(2))) return;
  last_ = now;
  shown_ = true;
  const double secs = std::chrono::duration<double>(now - start_).count();
  if (total_ > 0) {
    std::fprintf(stderr, "nvfp4moe %s: %s: %lld/%lld (%.0f%%, %.0f s)\n", command_.c_str(), what_.c_str(),
                 static_cast<long long>(done), static_cast<long long>(total_), 100.0 * done / total_, secs);
  } else {
    std::fprintf(stderr, "nvfp4moe %s: %s: %lld (%.0f s)\n", command_.c_str(), what_.c_str(),
                 static_cast<long long>(done), secs);
  }
}

void Progress::finish() {
  if (!shown_) return;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::fprintf(stderr, "nvfp4moe %s: %s: done in %.1f s\n", command_.c_str(), what_.c_str(), secs);
}

std::string human_bytes(double bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000 && u < 4) {
    bytes /= 1000;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", bytes, units[u]);
  return buf;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace nvfp4moe::cli
