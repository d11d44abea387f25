// Host memory: 64-byte aligned (one cache line, one AVX-512 vector), never initialised.
#pragma once

#include <cstddef>

namespace ember::cpu {

// Throws OutOfMemoryError naming the request when the system refuses.
void* host_alloc(size_t bytes);
void host_free(void* p) noexcept;

}  // namespace ember::cpu
