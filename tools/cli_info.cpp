// `nvfp4moe info`: what this build can do on this machine.
#include <cstdio>

#include "cli_common.hpp"
#include "nvfp4moe/cuda.hpp"

namespace nvfp4moe::cli {

namespace {
const char* yes_no(bool b) { return b ? "yes" : "no"; }

int run_info() {
  namespace nc = nvfp4moe::cuda;
  std::printf("nvfp4moe %s (commit %s)\n", build_version().c_str(), build_commit().c_str());
  const CpuFacts cpu = cpu_facts();
  std::printf("cpu: %s\n", cpu.model.c_str());
  std::printf("  features: avx2 %s, fma %s, avx512f %s, avx512bw %s, avx512bf16 %s\n", yes_no(cpu.avx2),
              yes_no(cpu.fma), yes_no(cpu.avx512f), yes_no(cpu.avx512bw), yes_no(cpu.avx512bf16));
  std::printf("  threads: %d usable (%d hardware)\n", cpu.usable_threads, cpu.hardware_threads);
  std::printf("cuda backend: %s\n", nc::built_with_cuda() ? "built" : "not built");
  const int n = nc::device_count();
  std::printf("cuda devices: %d\n", n);
  for (int i = 0; i < n; ++i) {
    nc::DeviceInfo d;
    const Status s = nc::device_info(i, &d);
    if (!s.ok()) {
      std::printf("  [%d] %s\n", i, s.to_string().c_str());
      continue;
    }
    std::printf("  [%d] %s, sm_%d%d, %d SMs, L2 %lld MiB, %.1f GiB\n", i, d.name.c_str(), d.cc_major, d.cc_minor,
                d.num_sms, static_cast<long long>(d.l2_bytes >> 20),
                static_cast<double>(d.global_mem_bytes) / (1024.0 * 1024.0 * 1024.0));
#if defined(NVFP4MOE_WITH_CUDA)
    const Status supported = nc::check_device_supported(i);
    std::printf("      kernels: %s\n", supported.ok() ? "supported" : supported.message().c_str());
#endif
  }
  return 0;
}
}  // namespace

Command add_info_command(CLI::App& app) {
  CLI::App* sub = app.add_subcommand("info", "Build features, CPU features and threads, CUDA devices");
  return {sub, run_info};
}

}  // namespace nvfp4moe::cli
