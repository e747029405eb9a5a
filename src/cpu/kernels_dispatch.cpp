#include "cpu/kernels.hpp"

namespace nvfp4moe::cpu {

const Kernels& best_kernels() {
  static const Kernels* const best = [] {
    if (const Kernels* k = avx512_kernels()) return k;
    if (const Kernels* k = avx2_kernels()) return k;
    return &scalar_kernels();
  }();
  return *best;
}

}  // namespace nvfp4moe::cpu
