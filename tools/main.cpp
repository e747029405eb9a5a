// The `nvfp4moe` command-line tool. Each subcommand lives in tools/cli_*.cpp.
#include <CLI/CLI.hpp>

#include <exception>
#include <new>
#include <string>
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
  for (const cli::Command& c : commands) {
    if (!c.app->parsed()) continue;
    // Commands report errors as Status; an allocation that fails outside the
    // library's checks (huge --tokens, say) still ends in a message, not abort().
    try {
      return c.run();
    } catch (const std::bad_alloc&) {
      return cli::fail(c.app->get_name(), "out of memory (try fewer tokens, a smaller preset or fewer layers)");
    } catch (const std::exception& e) {
      return cli::fail(c.app->get_name(), std::string("unexpected error: ") + e.what());
    }
  }
  return cli::kExitFailure;
}
