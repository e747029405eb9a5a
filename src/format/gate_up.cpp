// interleave_gate_up: the merged gate/up weight of the fused MoE layer, with
// gate and up rows alternating in blocks of 64 (see layout.hpp).
#include <cstdint>
#include <cstring>
#include <new>
#include <utility>

#include "format/weight_checks.hpp"
#include "nvfp4moe/layout.hpp"

namespace nvfp4moe {

namespace {
constexpr int64_t kGateUpRowBlock = 64;
}  // namespace

Status interleave_gate_up(const ExpertWeightsView& gate, const ExpertWeightsView& up, ExpertWeights* out) {
  if (out == nullptr) return invalid_argument("out is null");
  NVFP4MOE_RETURN_IF_ERROR(detail::check_weight_shape(gate.num_experts, gate.rows, gate.cols, "gate"));
  NVFP4MOE_RETURN_IF_ERROR(detail::check_weight_shape(up.num_experts, up.rows, up.cols, "up"));
  if (gate.codes == nullptr) return invalid_argument("gate.codes is null");
  if (gate.scales == nullptr) return invalid_argument("gate.scales is null");
  if (up.codes == nullptr) return invalid_argument("up.codes is null");
  if (up.scales == nullptr) return invalid_argument("up.scales is null");
  if (gate.num_experts != up.num_experts || gate.rows != up.rows || gate.cols != up.cols) {
    return invalid_argument("gate is [", gate.num_experts, "][", gate.rows, "][", gate.cols, "] but up is [",
                            up.num_experts, "][", up.rows, "][", up.cols, "]; they must have the same shape");
  }
  if (gate.rows % kGateUpRowBlock != 0) {
    return invalid_argument("gate.rows = ", gate.rows, " (F) is not a multiple of ", kGateUpRowBlock);
  }
  // 2F rows must stay addressable too.
  NVFP4MOE_RETURN_IF_ERROR(detail::check_weight_shape(gate.num_experts, 2 * gate.rows, gate.cols, "gate_up"));

  const int64_t num_experts = gate.num_experts, rows = gate.rows, cols = gate.cols;
  ExpertWeights result;
  try {
    result.codes.resize(static_cast<size_t>(num_experts * 2 * gate.expert_code_bytes()));
    result.scales.resize(static_cast<size_t>(num_experts * 2 * gate.expert_scale_bytes()));
  } catch (const std::bad_alloc&) {
    return make_status(StatusCode::kOutOfMemory, "interleave_gate_up: cannot allocate [", num_experts, "][",
                       2 * rows, "][", cols, "] weights");
  }

  // A 64-row block is contiguous in both the source and the output, so each
  // one is a single copy of codes and one of scales.
  const int64_t block_code_bytes = kGateUpRowBlock * gate.row_code_bytes();
  const int64_t block_scale_bytes = kGateUpRowBlock * gate.row_scale_bytes();
  const int64_t blocks_per_expert = rows / kGateUpRowBlock;
  for (int64_t e = 0; e < num_experts; ++e) {
    for (int64_t i = 0; i < blocks_per_expert; ++i) {
      const int64_t src_block = e * blocks_per_expert + i;
      const int64_t gate_dst = e * 2 * blocks_per_expert + 2 * i;
      const int64_t up_dst = gate_dst + 1;
      std::memcpy(result.codes.data() + gate_dst * block_code_bytes, gate.codes + src_block * block_code_bytes,
                  static_cast<size_t>(block_code_bytes));
      std::memcpy(result.codes.data() + up_dst * block_code_bytes, up.codes + src_block * block_code_bytes,
                  static_cast<size_t>(block_code_bytes));
      std::memcpy(result.scales.data() + gate_dst * block_scale_bytes, gate.scales + src_block * block_scale_bytes,
                  static_cast<size_t>(block_scale_bytes));
      std::memcpy(result.scales.data() + up_dst * block_scale_bytes, up.scales + src_block * block_scale_bytes,
                  static_cast<size_t>(block_scale_bytes));
    }
  }
  result.num_experts = num_experts;
  result.rows = 2 * rows;
  result.cols = cols;
  *out = std::move(result);  // out->alpha stays empty: see layout.hpp
  return ok_status();
}

}  // namespace nvfp4moe
