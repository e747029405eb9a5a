// The routing plan on the CPU: the reference definition the CUDA plan kernels
// are checked against, so every array is defined exactly (see plan.hpp).
#include "nvfp4moe/plan.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <new>
#include <vector>

#include "common/checks.hpp"

namespace nvfp4moe {
namespace {

constexpr int64_t kInt32Max = std::numeric_limits<int32_t>::max();

Status validate_sizes(int64_t num_tokens, int64_t top_k, int64_t num_experts) {
  if (num_experts <= 0) return invalid_argument("num_experts = ", num_experts, " must be positive");
  if (num_experts > kInt32Max) {
    return make_status(StatusCode::kOutOfRange, "num_experts = ", num_experts, " does not fit in int32");
  }
  if (top_k < 1 || top_k > num_experts) {
    return invalid_argument("top_k = ", top_k, " must be in [1, num_experts = ", num_experts, "]");
  }
  if (num_tokens < 0) return invalid_argument("num_tokens = ", num_tokens, " is negative");
  // Compact rows and pair indices are int32 on the host and on the device.
  if (num_tokens > kInt32Max / top_k) {
    return make_status(StatusCode::kOutOfRange, "num_tokens * top_k = ", num_tokens, " * ", top_k,
                       " exceeds the int32 limit of ", kInt32Max, " routed pairs");
  }
  return ok_status();
}

}  // namespace

Status validate_plan_options(const PlanOptions& opt) {
  if (opt.block_rows <= 0) return invalid_argument("block_rows = ", opt.block_rows, " must be positive");
  if (opt.light_max_rows < 0 || opt.light_max_rows > opt.block_rows)
    return invalid_argument("light_max_rows = ", opt.light_max_rows, " must be in [0, block_rows = ", opt.block_rows,
                            "]");
  if (opt.broad_rows != 0 && opt.broad_rows <= opt.block_rows)
    return invalid_argument("broad_rows = ", opt.broad_rows, " must be 0 or more than block_rows = ", opt.block_rows);
  return ok_status();
}

Status validate_ids(const int32_t* ids, int64_t num_tokens, int64_t top_k, int64_t num_experts) {
  NVFP4MOE_RETURN_IF_ERROR(validate_sizes(num_tokens, top_k, num_experts));
  if (num_tokens == 0) return ok_status();
  if (ids == nullptr) return invalid_argument("ids is null but num_tokens = ", num_tokens);
  NVFP4MOE_RETURN_IF_ERROR(detail::check_aligned(ids, alignof(int32_t), "ids", "int32"));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const int32_t* row = ids + t * top_k;
    for (int64_t j = 0; j < top_k; ++j) {
      const int32_t e = row[j];
      if (e < 0 || e >= num_experts) {
        return invalid_argument("ids[", t, "][", j, "] = ", e, " is out of range [0, ", num_experts, ")");
      }
      // k is small (<= 32 in practice), so the quadratic scan beats a bitmap.
      for (int64_t i = 0; i < j; ++i) {
        if (row[i] == e) {
          return invalid_argument("ids[", t, "][", i, "] and ids[", t, "][", j, "] are both expert ", e,
                                  " (an expert may appear once per token)");
        }
      }
    }
  }
  return ok_status();
}

Status build_routing_plan(const int32_t* ids, int64_t num_tokens, int64_t top_k, int64_t num_experts,
                          const PlanOptions& opt, RoutingPlan* out) {
  if (out == nullptr) return invalid_argument("out (RoutingPlan*) is null");
  NVFP4MOE_RETURN_IF_ERROR(validate_plan_options(opt));
  NVFP4MOE_RETURN_IF_ERROR(validate_ids(ids, num_tokens, top_k, num_experts));

  const int32_t num_pairs = static_cast<int32_t>(num_tokens * top_k);
  const int32_t E = static_cast<int32_t>(num_experts);
  try {
    RoutingPlan plan;
    plan.num_tokens = static_cast<int32_t>(num_tokens);
    plan.top_k = static_cast<int32_t>(top_k);
    plan.num_experts = E;
    plan.block_rows = opt.block_rows;
    plan.light_max_rows = opt.light_max_rows;
    plan.broad_rows = opt.broad_rows;
    plan.counts.assign(E, 0);
    plan.offsets.assign(static_cast<size_t>(E) + 1, 0);
    plan.sorted_src.resize(num_pairs);
    plan.inverse.resize(num_pairs);

    for (int32_t p = 0; p < num_pairs; ++p) ++plan.counts[ids[p]];
    for (int32_t e = 0; e < E; ++e) {
      plan.offsets[e + 1] = plan.offsets[e] + plan.counts[e];
      plan.max_count = std::max(plan.max_count, plan.counts[e]);
    }

    // Counting sort in pair order: stable, hence tokens ascend within an expert.
    std::vector<int32_t> cursor(plan.offsets.begin(), plan.offsets.end() - 1);
    for (int32_t p = 0; p < num_pairs; ++p) {
      const int32_t r = cursor[ids[p]]++;
      plan.sorted_src[r] = p;
      plan.inverse[p] = r;
    }

    // Three passes over the experts, one per class, in job order.
    enum Class { kRegular, kBroad, kLight };
    const auto class_of = [&](int32_t n) {
      if (n > 0 && n <= opt.light_max_rows) return kLight;
      return takes_broad_tiles(n, opt.block_rows, opt.broad_rows) ? kBroad : kRegular;
    };
    size_t num_jobs = 0;
    for (int32_t e = 0; e < E; ++e)
      num_jobs += (plan.counts[e] + static_cast<int64_t>(opt.block_rows) - 1) / opt.block_rows;
    plan.jobs.reserve(num_jobs);
    for (const Class pass : {kRegular, kBroad, kLight}) {
      if (pass == kBroad) plan.broad_jobs_begin = static_cast<int32_t>(plan.jobs.size());
      if (pass == kLight) plan.light_jobs_begin = static_cast<int32_t>(plan.jobs.size());
      const int32_t br = pass == kBroad ? opt.broad_rows : opt.block_rows;
      for (int32_t e = 0; e < E; ++e) {
        if (class_of(plan.counts[e]) != pass) continue;
        for (int32_t done = 0; done < plan.counts[e]; done += std::min(br, plan.counts[e] - done)) {
          const int32_t rows = std::min(br, plan.counts[e] - done);
          plan.jobs.push_back(ExpertJob{e, plan.offsets[e] + done, rows, job_tile_rows(rows, br)});
        }
      }
    }
    *out = std::move(plan);
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, "routing plan for ", num_pairs, " pairs and ", E,
                       " experts: host allocation failed");
  }
  return ok_status();
}

std::vector<ExpertJob> rect_jobs(const RoutingPlan& plan) {
  std::vector<ExpertJob> jobs;
  const int32_t br = plan.block_rows;
  if (br <= 0 || plan.max_count <= 0) return jobs;
  if (plan.counts.size() != static_cast<size_t>(plan.num_experts) ||
      plan.offsets.size() != static_cast<size_t>(plan.num_experts) + 1) {
    return jobs;
  }
  const int32_t tiles = static_cast<int32_t>((static_cast<int64_t>(plan.max_count) + br - 1) / br);
  try {
    jobs.reserve(static_cast<size_t>(plan.num_experts) * tiles);
    for (int32_t e = 0; e < plan.num_experts; ++e) {
      for (int32_t i = 0; i < tiles; ++i) {
        const int64_t first = static_cast<int64_t>(i) * br;
        const int32_t begin = static_cast<int32_t>(std::min<int64_t>(first, plan.counts[e]));
        const int32_t rows = static_cast<int32_t>(std::min<int64_t>(br, plan.counts[e] - begin));
        jobs.push_back(ExpertJob{e, plan.offsets[e] + begin, rows, br});
      }
    }
  } catch (const std::bad_alloc&) {
    jobs.clear();
  }
  return jobs;
}

}  // namespace nvfp4moe
