// The `nvfp4moe` command-line tool.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "nvfp4moe/cuda.hpp"

int main(int argc, char** argv) {
  CLI::App app{"nvfp4moe: NVFP4 mixture-of-experts matmuls"};
  app.require_subcommand(1);
  auto* info = app.add_subcommand("info", "Build features and devices found");
  CLI11_PARSE(app, argc, argv);
  if (info->parsed()) {
    namespace nc = nvfp4moe::cuda;
    std::printf("nvfp4moe %s\n", "0.1.0");
    std::printf("cuda backend: %s\n", nc::built_with_cuda() ? "built" : "not built");
    const int n = nc::device_count();
    std::printf("cuda devices: %d\n", n);
    for (int i = 0; i < n; ++i) {
      nc::DeviceInfo d;
      if (nc::device_info(i, &d).ok())
        std::printf("  [%d] %s sm_%d%d, %d SMs, L2 %lld MiB\n", i, d.name.c_str(), d.cc_major, d.cc_minor, d.num_sms,
                    static_cast<long long>(d.l2_bytes >> 20));
    }
  }
  return 0;
}
