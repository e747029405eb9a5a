// Fuzzes build_routing_plan with arbitrary ids and sizes and checks the
// plan's invariants whenever it is accepted.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "nvfp4moe/plan.hpp"

using namespace nvfp4moe;

namespace {
void require(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  // Header: k, E (two bytes), a byte that selects block_rows (low 3 bits),
  // light experts (bit 3) and broad ones (bit 4, and how much broader in the
  // top 3 bits; broad_rows <= block_rows is rejected); the rest is ids.
  const int64_t top_k = static_cast<int8_t>(data[0]);
  const int64_t num_experts = static_cast<int16_t>(data[1] | (data[2] << 8));
  const int32_t block_rows_choices[] = {1, 2, 3, 8, 64, 128, 0, -5};
  PlanOptions opt;
  opt.block_rows = block_rows_choices[data[3] % 8];
  if (data[3] & 8) opt.light_max_rows = opt.block_rows > 4 ? 4 : opt.block_rows;
  if (data[3] & 16) opt.broad_rows = opt.block_rows + (data[3] >> 5) - 1;
  std::vector<int32_t> ids((size - 4) / 4);
  if (!ids.empty()) std::memcpy(ids.data(), data + 4, ids.size() * 4);
  const int64_t num_tokens = top_k > 0 ? static_cast<int64_t>(ids.size()) / top_k : static_cast<int64_t>(ids.size());

  RoutingPlan plan;
  const Status s = build_routing_plan(ids.data(), num_tokens, top_k, num_experts, opt, &plan);
  (void)validate_ids(ids.data(), num_tokens, top_k, num_experts);
  if (!s.ok()) return 0;
  const int64_t pairs = num_tokens * top_k;
  require(plan.num_experts == num_experts && plan.top_k == top_k && plan.num_tokens == num_tokens);
  require(plan.counts.size() == static_cast<size_t>(num_experts));
  require(plan.offsets.size() == static_cast<size_t>(num_experts) + 1 && plan.offsets[0] == 0 &&
          plan.offsets.back() == pairs);
  require(plan.sorted_src.size() == static_cast<size_t>(pairs) && plan.inverse.size() == static_cast<size_t>(pairs));
  for (int64_t e = 0; e < num_experts; ++e) require(plan.offsets[e + 1] - plan.offsets[e] == plan.counts[e]);
  for (int64_t r = 0; r < pairs; ++r) {
    const int32_t p = plan.sorted_src[r];
    require(p >= 0 && p < pairs && plan.inverse[p] == r);
    const int32_t e = ids[p];
    require(r >= plan.offsets[e] && r < plan.offsets[e + 1]);
    if (r > plan.offsets[e]) require(plan.sorted_src[r - 1] < p);  // stable
  }
  std::vector<uint8_t> covered(static_cast<size_t>(pairs), 0);
  require(plan.broad_jobs_begin >= 0 && plan.broad_jobs_begin <= plan.light_jobs_begin &&
          plan.light_jobs_begin <= static_cast<int32_t>(plan.jobs.size()));
  for (size_t i = 0; i < plan.jobs.size(); ++i) {
    const ExpertJob& j = plan.jobs[i];
    const int32_t job = static_cast<int32_t>(i);
    const bool broad = job >= plan.broad_jobs_begin && job < plan.light_jobs_begin;
    require(j.expert >= 0 && j.expert < num_experts);
    require(j.num_rows >= 1 && j.num_rows <= (broad ? opt.broad_rows : opt.block_rows));
    require(j.row_begin >= plan.offsets[j.expert] && j.row_begin + j.num_rows <= plan.offsets[j.expert + 1]);
    for (int32_t r = j.row_begin; r < j.row_begin + j.num_rows; ++r) require(covered[r]++ == 0);
  }
  for (uint8_t c : covered) require(c == 1);
  (void)rect_jobs(plan);
  return 0;
}
