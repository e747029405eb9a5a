// Internals of the CPU backend shared by its files and its tests.
#pragma once

#include "cpu/kernels.hpp"
#include "nvfp4moe/ops.hpp"

namespace nvfp4moe {
namespace detail {

// alpha[e] finite and >= 0 for every expert (nullptr passes), with the
// message format of validate_weights.
Status check_alpha(const ExpertWeightsView& w, const char* name);

}  // namespace detail

namespace cpu {

// The CPU ops with an explicit kernel set: tests compare the sets bit for bit.
Status mul_mat_id_with(const MulMatIdArgs& a, const CpuOptions& opt, const Kernels& kernels);
Status moe_layer_with(const MoeLayerArgs& a, const CpuOptions& opt, const Kernels& kernels);

}  // namespace cpu
}  // namespace nvfp4moe
