// Aligned host allocation (see host_allocator.h).
#include "host_allocator.h"

#include <atomic>
#include <cstdlib>
#include <string>

#include "../error.h"

namespace ember::cpu {

namespace {
constexpr size_t kAlignment = 64;
std::atomic<size_t> g_in_use{0}, g_peak{0};
}  // namespace

void* host_alloc(size_t bytes) {
  const size_t rounded = (bytes + kAlignment - 1) / kAlignment * kAlignment;
  void* p = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (!p) throw OutOfMemoryError("host allocation of " + std::to_string(bytes) + " bytes failed");
  const size_t now = g_in_use.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  size_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return p;
}

void host_free(void* p, size_t bytes) noexcept {
  if (!p) return;
  std::free(p);
  g_in_use.fetch_sub(bytes, std::memory_order_relaxed);
}

HostMemoryCounts host_memory_counts() noexcept {
  return {g_in_use.load(std::memory_order_relaxed), g_peak.load(std::memory_order_relaxed)};
}

void reset_host_memory_peak() noexcept {
  g_peak.store(g_in_use.load(std::memory_order_relaxed), std::memory_order_relaxed);
  // An allocation on another thread between the load and the store found the old, higher peak
  // and left it: raise the new one to what is in use now.
  const size_t now = g_in_use.load(std::memory_order_relaxed);
  size_t peak = g_peak.load(std::memory_order_relaxed);
  while (now > peak && !g_peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

}  // namespace ember::cpu
