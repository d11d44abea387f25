// The caching allocator (see caching_allocator.h).
#include "caching_allocator.h"

#include <cmath>
#include <cstdio>
#include <iterator>

#include "error.h"

namespace ember {

std::string format_bytes(size_t bytes) {
  const char* units[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) v /= 1024.0, ++u;
  char buf[48];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%zu bytes", bytes);
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
  return buf;
}

MemoryPolicy MemoryPolicy::limit(std::string_view text) {
  const std::string s(text);
  const auto bad = [&] {
    return ArgumentError("invalid memory limit '" + s +
                         "': expected bytes, or a number with KiB, MiB, GiB, KB, MB or GB");
  };
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(s, &used);
  } catch (const std::exception&) {
    throw bad();
  }
  const std::string unit = s.substr(used);
  double scale = 0;
  if (unit.empty() || unit == "B")
    scale = 1;
  else if (unit == "KiB")
    scale = 1024.0;
  else if (unit == "MiB")
    scale = 1024.0 * 1024;
  else if (unit == "GiB")
    scale = 1024.0 * 1024 * 1024;
  else if (unit == "KB")
    scale = 1e3;
  else if (unit == "MB")
    scale = 1e6;
  else if (unit == "GB")
    scale = 1e9;
  else
    throw bad();
  if (!(value > 0) || !std::isfinite(value) || value * scale > 1e18) throw bad();
  MemoryPolicy p;
  p.limit_bytes = static_cast<size_t>(value * scale);
  return p;
}

MemoryPolicy MemoryPolicy::fraction(double f, size_t total_bytes) {
  EMBER_CHECK(f > 0 && f <= 1, ArgumentError, "memory fraction must be in (0, 1], got " + std::to_string(f));
  MemoryPolicy p;
  p.limit_bytes = static_cast<size_t>(f * static_cast<double>(total_bytes));
  return p;
}

std::string MemoryPolicy::str() const { return limit_bytes ? "limit " + format_bytes(limit_bytes) : "grow"; }

CachingAllocator::CachingAllocator(std::string device, RawAlloc raw_alloc, RawFree raw_free, MemoryPolicy policy)
    : device_(std::move(device)), raw_alloc_(std::move(raw_alloc)), raw_free_(std::move(raw_free)), policy_(policy) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard lock(mu_);
  release_cached_locked();
  // Blocks still handed out belong to tensors that outlive the allocator: a bug elsewhere, but
  // freeing them here would turn it into a use-after-free, so they are left to the process.
}

void CachingAllocator::out_of_memory(size_t request, const char* why) const {
  std::string msg = "out of memory on " + device_ + ": " + why + " (requested " + format_bytes(request) + ", in use " +
                    format_bytes(stats_.in_use) + ", cached " + format_bytes(stats_.cached) +
                    (stats_.graph_held ? ", held for CUDA graphs " + format_bytes(stats_.graph_held) : "") +
                    ", policy " + policy_.str() + ", peak " + format_bytes(stats_.peak_in_use) + ")";
  throw OutOfMemoryError(msg);
}

void* CachingAllocator::allocate(size_t bytes) {
  const size_t size = (std::max<size_t>(bytes, 1) + kGranularity - 1) / kGranularity * kGranularity;
  std::lock_guard lock(mu_);
  // Best fit among cached blocks, but never more than twice the request (no 1 GiB block for
  // a 1 KiB tensor).
  auto it = free_.lower_bound(size);
  if (it != free_.end() && it->first <= 2 * size) {
    void* p = it->second;
    const size_t block = it->first;
    free_.erase(it);
    stats_.cached -= block;
    stats_.in_use += block;
    stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
    ++stats_.cache_hits;
    live_.emplace(p, block);
    return p;
  }
  const auto over_limit = [&] {
    return policy_.limit_bytes && stats_.in_use + stats_.cached + stats_.graph_held + size > policy_.limit_bytes;
  };
  // Under the cap, cached blocks are given back largest first, only until the request fits:
  // each free is a device-wide synchronisation, and the small blocks the step reuses stay. Not
  // during a graph capture: a device free there would end the capture.
  while (over_limit() && !free_.empty() && !capturing_) release_largest_locked();
  if (over_limit())
    out_of_memory(size, capturing_ ? "the request exceeds the memory limit (during a graph capture, which gives "
                                     "no cached block back)"
                                   : "the request exceeds the memory limit");
  void* p = raw_alloc_(size);
  while (!p && !free_.empty() && !capturing_) {  // the device itself is full: the same, one block at a time
    release_largest_locked();
    p = raw_alloc_(size);
  }
  if (!p) out_of_memory(size, "the device has no more memory");
  ++stats_.raw_allocs;
  stats_.in_use += size;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  live_.emplace(p, size);
  return p;
}

void CachingAllocator::deallocate(void* p) noexcept {
  if (!p) return;
  std::lock_guard lock(mu_);
  const auto it = live_.find(p);
  if (it == live_.end()) return;  // not ours: ignoring beats corrupting the cache
  const size_t size = it->second;
  live_.erase(it);
  stats_.in_use -= size;
  if (capturing_ || (graphs_ > 0 && graph_blocks_.erase(p) > 0)) {  // a graph may still use it
    try {
      held_.emplace_back(size, p);
      stats_.graph_held += size;
    } catch (...) {  // no memory to remember it: leaked, never freed under a graph that uses it
    }
    return;
  }
  cache_locked(size, p);
}

void CachingAllocator::cache_locked(size_t size, void* p) noexcept {
  try {
    free_.emplace(size, p);
    stats_.cached += size;
  } catch (...) {  // no memory for the cache node: give the block back instead
    raw_free_(p);
    ++stats_.raw_frees;
  }
}

void CachingAllocator::release_cached() noexcept {
  std::lock_guard lock(mu_);
  release_cached_locked();
}

void CachingAllocator::release_largest_locked() noexcept {
  const auto it = std::prev(free_.end());
  raw_free_(it->second);
  ++stats_.raw_frees;
  stats_.cached -= it->first;
  free_.erase(it);
}

void CachingAllocator::release_cached_locked() noexcept {
  for (auto& [size, p] : free_) {
    raw_free_(p);
    ++stats_.raw_frees;
  }
  free_.clear();
  stats_.cached = 0;
}

void CachingAllocator::begin_capture() {
  std::lock_guard lock(mu_);
  EMBER_CHECK(!capturing_, Error, device_ + ": a graph capture is already under way");
  held_.reserve(held_.size() + live_.size());  // frees during the capture need no allocation
  capturing_ = true;
}

void CachingAllocator::end_capture() {
  std::lock_guard lock(mu_);
  capturing_ = false;
  // Built aside and merged only when complete: a failure leaves the state as it was.
  std::unordered_set<void*> blocks = graph_blocks_;
  for (const auto& [p, size] : live_) blocks.insert(p);
  held_.reserve(held_.size() + blocks.size());  // their frees need no allocation
  graph_blocks_.swap(blocks);
  ++graphs_;
}

void CachingAllocator::abort_capture() noexcept {
  std::lock_guard lock(mu_);
  capturing_ = false;
  if (graphs_ == 0) return_held_locked();  // else they stay held with the live graphs' blocks
}

void CachingAllocator::return_held_locked() noexcept {
  for (const auto& [size, p] : held_) cache_locked(size, p);
  stats_.graph_held = 0;
  held_.clear();
}

void CachingAllocator::release_graph() noexcept {
  std::lock_guard lock(mu_);
  if (graphs_ == 0 || --graphs_ > 0) return;
  graph_blocks_.clear();
  if (!capturing_) return_held_locked();  // a capture under way keeps holding what it frees
}

CachingAllocator::Stats CachingAllocator::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace ember
