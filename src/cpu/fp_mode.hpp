// The floating-point mode the CPU kernels assume, set for the duration of an
// op on every thread taking part: round to nearest even, denormals neither
// flushed nor treated as zero. A caller built with -ffast-math (which sets
// FTZ/DAZ at start-up) therefore gets the same bits as everyone else, and the
// AVX2 scale decoder may rely on exact denormal arithmetic.
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

namespace nvfp4moe::cpu {

class ScopedIeeeMode {
 public:
#if defined(__x86_64__) || defined(__i386__)
  // 0x1F80: all exceptions masked, round to nearest, no FTZ, no DAZ.
  ScopedIeeeMode() : saved_(_mm_getcsr()) { _mm_setcsr(0x1F80u); }
  ~ScopedIeeeMode() { _mm_setcsr(saved_); }

 private:
  unsigned saved_;
#else
  ScopedIeeeMode() = default;
#endif

 public:
  ScopedIeeeMode(const ScopedIeeeMode&) = delete;
  ScopedIeeeMode& operator=(const ScopedIeeeMode&) = delete;
};

}  // namespace nvfp4moe::cpu
