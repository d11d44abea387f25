// Host memory: 64-byte aligned (one cache line, one AVX-512 vector), never initialised.
#pragma once

#include <cstddef>

namespace ember::cpu {

// Throws OutOfMemoryError naming the request when the system refuses.
void* host_alloc(size_t bytes);
void host_free(void* p, size_t bytes) noexcept;  // `bytes`: as given to host_alloc

// Bytes of tensor storage held now and at most since the last reset (host_alloc's requests).
struct HostMemoryCounts {
  size_t in_use = 0, peak_in_use = 0;
};
HostMemoryCounts host_memory_counts() noexcept;
void reset_host_memory_peak() noexcept;  // the peak becomes what is in use now

}  // namespace ember::cpu
