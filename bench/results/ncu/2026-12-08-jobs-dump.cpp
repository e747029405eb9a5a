// Experiment only (not part of the library): the plan's job list for the
// bench's four routings (seeds seed + 0..3), one line per routing, each job
// as expert:tile_rows:class (r regular, b broad, l light), from the
// library's own routing generator and CPU plan. Input of
// 2026-12-08-wave-model.py.
//   c++ -O2 -std=c++20 -Iinclude -Itools bench/results/ncu/2026-12-08-jobs-dump.cpp \
//       build/tools/libnvfp4moe_tools.a build/libnvfp4moe.a -lpthread -o /tmp/jobs-dump
//   /tmp/jobs-dump E K T ZIPF_S LIGHT_MAX_ROWS BROAD_ROWS   (ZIPF_S 0: uniform, -1: balanced)
#include <cstdio>
#include <cstdlib>
#include "bench.hpp"
#include "nvfp4moe/plan.hpp"
int main(int argc, char** argv) {
  const int64_t E = std::atoll(argv[1]), k = std::atoll(argv[2]), T = std::atoll(argv[3]);
  const double s = std::atof(argv[4]);
  const int light_max = std::atoi(argv[5]), broad_rows = std::atoi(argv[6]);
  nvfp4moe::bench::Routing routing;
  routing.zipf = s > 0; routing.zipf_s = s; routing.balanced = s < 0;
  for (uint64_t r = 0; r < 4; ++r) {
    const auto ids = nvfp4moe::bench::make_routing(routing, T, k, E, nvfp4moe::bench::kDefaultBenchSeed + r);
    nvfp4moe::PlanOptions opt; opt.block_rows = 128; opt.light_max_rows = light_max; opt.broad_rows = broad_rows;
    nvfp4moe::RoutingPlan plan;
    if (!nvfp4moe::build_routing_plan(ids.data(), T, k, E, opt, &plan).ok()) return 1;
    std::printf("R%llu", (unsigned long long)r);
    for (size_t j = 0; j < plan.jobs.size(); ++j)
      std::printf(" %d:%d:%c", plan.jobs[j].expert, plan.jobs[j].tile_rows,
                  int(j) < plan.broad_jobs_begin ? 'r' : int(j) < plan.light_jobs_begin ? 'b' : 'l');
    std::printf("\n");
  }
}
