// The `nvfp4moe` command-line tool. Each subcommand lives in tools/cli_*.cpp.
#include <CLI/CLI.hpp>

#include <vector>

#include "cli_common.hpp"

int main(int argc, char** argv) {
  namespace cli = nvfp4moe::cli;
  cli::set_command_line(argc, argv);
  CLI::App app{"nvfp4moe: NVFP4 mixture-of-experts matmuls (ggml MUL_MAT_ID and the fused MoE FFN layer)"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "nvfp4moe " + cli::build_version() + " (" + cli::build_commit() + ")");
  const std::vector<cli::Command> commands = {
      cli::add_info_command(app),      cli::add_bench_command(app),     cli::add_inspect_command(app),
      cli::add_dequant_command(app),   cli::add_matmul_id_command(app), cli::add_run_command(app),
      cli::add_quantize_command(app),
  };
  CLI11_PARSE(app, argc, argv);
  for (const cli::Command& c : commands)
    if (c.app->parsed()) return c.run();
  return cli::kExitFailure;
}
