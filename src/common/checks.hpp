// Argument checks shared by the public entry points. Private to the library.
#pragma once

#include <cstddef>
#include <cstdint>

#include "nvfp4moe/status.hpp"

namespace nvfp4moe::detail {

// Reading F32, BF16 or int32 elements through a pointer that is not aligned
// to their size is undefined behaviour (and traps under UBSan), so such a
// pointer is refused: "x = 0x5581 is not 4-byte aligned (F32 elements)".
// nullptr passes; callers check for null where it matters.
inline Status check_aligned(const void* p, size_t alignment, const char* name, const char* element) {
  if (reinterpret_cast<uintptr_t>(p) % alignment == 0) return ok_status();
  return invalid_argument(name, " = ", p, " is not ", alignment, "-byte aligned (", element, " elements)");
}

}  // namespace nvfp4moe::detail
