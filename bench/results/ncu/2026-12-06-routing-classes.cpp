// Experiment only (not part of the library): what the bench's routings give
// the plan path's two expert classes, from the library's own routing
// generator (tools/bench.hpp make_routing) and CPU plan (build_routing_plan),
// so that perf.md's account of a skewed case's work is exact for the four
// routings the bench times (seeds seed + 0..3) rather than a simulation.
// Per routing: experts hit, light experts (<= light_max_rows rows) and their
// rows, regular jobs, weight passes (an expert's weights are dequantized once
// per job: one per job), and the regular jobs' tile work in units of
// 128 + wgmma width per K block (the wide kernel's cost model, perf.md).
//   c++ -O2 -std=c++20 -Iinclude -Itools bench/results/ncu/2026-12-06-routing-classes.cpp \
//       build/tools/libnvfp4moe_tools.a build/libnvfp4moe.a -lpthread -o /tmp/routing-classes
//   /tmp/routing-classes E K T ZIPF_S [LIGHT_MAX_ROWS=32] [WIDTH_96=1] [BROAD_ROWS=0]
//   (ZIPF_S 0: uniform, -1: balanced). With BROAD_ROWS (160: the broad class,
//   2026-12-07) the broad experts' jobs and their units (128 + BROAD_ROWS per
//   job) are counted apart from the regular ones.
#include <cstdio>
#include <cstdlib>

#include "bench.hpp"
#include "nvfp4moe/plan.hpp"

namespace {

int width_of(int tile_rows, bool width_96) {
  // mma_width (sm90/nvfp4_grouped_gemm.cuh) of the wide kernel's two sets, restated
  // here because that header compiles only under nvcc; keep the two alike.
  if (width_96) return tile_rows <= 64 ? 64 : tile_rows <= 96 ? 96 : 128;
  return tile_rows <= 32 ? 32 : tile_rows <= 64 ? 64 : 128;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s E K T ZIPF_S [LIGHT_MAX_ROWS] [WIDTH_96]\n", argv[0]);
    return 2;
  }
  const int64_t E = std::atoll(argv[1]), k = std::atoll(argv[2]), T = std::atoll(argv[3]);
  const double s = std::atof(argv[4]);
  const int light_max = argc > 5 ? std::atoi(argv[5]) : 32;
  const bool width_96 = argc > 6 ? std::atoi(argv[6]) != 0 : true;
  const int broad_rows = argc > 7 ? std::atoi(argv[7]) : 0;
  nvfp4moe::bench::Routing routing;
  routing.zipf = s > 0;
  routing.zipf_s = s;
  routing.balanced = s < 0;
  for (uint64_t r = 0; r < 4; ++r) {
    const auto ids = nvfp4moe::bench::make_routing(routing, T, k, E, nvfp4moe::bench::kDefaultBenchSeed + r);
    nvfp4moe::PlanOptions opt;
    opt.block_rows = 128;
    opt.light_max_rows = light_max;
    opt.broad_rows = broad_rows;
    nvfp4moe::RoutingPlan plan;
    const auto st = nvfp4moe::build_routing_plan(ids.data(), T, k, E, opt, &plan);
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
    int hit = 0, light = 0, light_rows = 0, hist[5] = {};
    for (int64_t e = 0; e < E; ++e) {
      const int c = plan.counts[e];
      hit += c > 0;
      if (c > 0 && c <= light_max) {
        ++light;
        light_rows += c;
      }
      hist[c == 0 ? 0 : c <= 8 ? 1 : c <= 16 ? 2 : c <= 32 ? 3 : 4] += 1;
    }
    long regular_units = 0;
    for (int32_t j = 0; j < plan.broad_jobs_begin; ++j) regular_units += 128 + width_of(plan.jobs[j].tile_rows, width_96);
    const int regular_jobs = plan.broad_jobs_begin;
    const int broad_jobs = plan.light_jobs_begin - plan.broad_jobs_begin;
    const long broad_units = long(broad_jobs) * (128 + broad_rows);
    const int light_jobs = static_cast<int>(plan.jobs.size()) - plan.light_jobs_begin;
    std::printf(
        "routing %llu: hit %d, light experts %d (%d rows, %d jobs), regular jobs %d (%ld units), broad jobs %d "
        "(%ld units), weight passes %d, experts by rows: 0 %d, 1-8 %d, 9-16 %d, 17-32 %d, >32 %d, largest %d\n",
        static_cast<unsigned long long>(r), hit, light, light_rows, light_jobs, regular_jobs, regular_units, broad_jobs,
        broad_units,
        static_cast<int>(plan.jobs.size()), hist[0], hist[1], hist[2], hist[3], hist[4], plan.max_count);
  }
  return 0;
}
