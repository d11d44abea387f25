// Aligned host allocation (see host_allocator.h).
#include "host_allocator.h"

#include <cstdlib>
#include <string>

#include "../error.h"

namespace ember::cpu {

namespace {
constexpr size_t kAlignment = 64;
}

void* host_alloc(size_t bytes) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (!p) throw OutOfMemoryError("host allocation of " + std::to_string(bytes) + " bytes failed");
  return p;
}

void host_free(void* p) noexcept { std::free(p); }

}  // namespace ember::cpu
