/// @file
/// CachingAllocator: device memory the way TensorFlow users expect it, independent of the device
/// API (the CUDA module instantiates it over cudaMalloc/cudaFree; tests over malloc).
///
/// Policies (MemoryPolicy): grow on demand (default) or a hard cap in bytes (TensorFlow's
/// memory limit; a fraction of the card becomes a cap of fraction * total). Freed blocks stay
/// cached for reuse, so a training loop that allocates the same sizes every step stops calling
/// the device allocator after its first step. When a request would exceed the cap, or the
/// device refuses, cached blocks are released and the request retried once; if it still does
/// not fit, OutOfMemoryError names the request, the cap and the bytes in use and cached.
///
/// CUDA graphs: a captured graph keeps using the addresses it was captured with, so while one
/// lives, every block it may touch (live at the end of its capture, or freed during it) is held
/// for it when freed, never handed to other work, until release_graph() (after the graph is
/// destroyed and its work done) returns them to the cache.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace ember {

/// How much device memory an allocator may hold: grow on demand, or a cap in bytes.
struct MemoryPolicy {
  size_t limit_bytes = 0;  ///< 0: grow on demand without a cap
  /// "4096", "512MiB", "2GiB", "1.5GiB", "300MB" (MB/GB are powers of 1000); ArgumentError otherwise.
  static MemoryPolicy limit(std::string_view text);
  /// A cap of fraction * total_bytes, 0 < fraction <= 1; ArgumentError otherwise.
  static MemoryPolicy fraction(double fraction, size_t total_bytes);
  std::string str() const;  ///< "grow" or "limit 512.0 MiB"
};

/// `bytes` in words, with a binary unit: "512.0 MiB".
std::string format_bytes(size_t bytes);

/// A thread-safe caching allocator over a device's raw allocation functions (see
/// caching_allocator.h).
class CachingAllocator {
 public:
  using RawAlloc = std::function<void*(size_t)>;  ///< returns nullptr when the device refuses
  using RawFree = std::function<void(void*)>;     ///< must not throw

  /// What the allocator holds and has done, in bytes and calls.
  struct Stats {
    size_t in_use = 0;       ///< bytes handed out (rounded sizes)
    size_t cached = 0;       ///< bytes held in the cache, free for reuse
    size_t peak_in_use = 0;  ///< the most in_use has been
    size_t graph_held = 0;   ///< bytes freed but held for a live graph (not reusable)
    /// Calls of the device allocator and of its free, and requests served from the cache.
    ///@{
    size_t raw_allocs = 0, raw_frees = 0, cache_hits = 0;
    ///@}
  };

  /// An allocator for `device` (the name its errors give) over `raw_alloc` and `raw_free`, under `policy`.
  CachingAllocator(std::string device, RawAlloc raw_alloc, RawFree raw_free, MemoryPolicy policy = {});
  ~CachingAllocator();  ///< returns every cached block to the device; never throws
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  /// A block of at least `bytes` (rounded up to kGranularity): a cached block when one fits (at most
  /// twice the request), else a new one from the device. OutOfMemoryError when it does not fit (see
  /// caching_allocator.h).
  void* allocate(size_t bytes);
  /// Returns a block from allocate() to the cache (or holds it for a live graph). Null and unknown
  /// pointers are ignored.
  void deallocate(void* p) noexcept;
  /// Gives every cached block back to the device.
  void release_cached() noexcept;
  Stats stats() const;                                    ///< A snapshot of the counters.
  const MemoryPolicy& policy() const { return policy_; }  ///< The policy it was made with.

  /// Graph capture (see caching_allocator.h): begin_capture() when a capture starts; then end_capture() when it
  /// produced a graph (every block live now is the graph's too), or abort_capture() when it failed.
  /// release_graph() once per ended capture, when its graph is destroyed and no work of it is
  /// queued: with no graph left, the held blocks return to the cache.
  void begin_capture();
  void end_capture();             ///< A capture produced a graph: every live block is now the graph's too.
  void abort_capture() noexcept;  ///< A capture failed: no graph holds its blocks.
  void release_graph() noexcept;  ///< An ended capture's graph is gone; see begin_capture().

  static constexpr size_t kGranularity = 512;  ///< every block is a multiple of this

 private:
  void release_cached_locked() noexcept;
  void release_largest_locked() noexcept;            // gives the largest cached block back (free_ not empty)
  void return_held_locked() noexcept;                // the held blocks back to the cache
  void cache_locked(size_t size, void* p) noexcept;  // into free_ (or back to the device)
  [[noreturn]] void out_of_memory(size_t request, const char* why) const;

  std::string device_;
  RawAlloc raw_alloc_;
  RawFree raw_free_;
  MemoryPolicy policy_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;       // cached blocks by size
  std::unordered_map<void*, size_t> live_;  // handed-out blocks and their sizes
  bool capturing_ = false;
  int graphs_ = 0;                              // captures ended and not yet released
  std::unordered_set<void*> graph_blocks_;      // live blocks a graph may use
  std::vector<std::pair<size_t, void*>> held_;  // freed blocks kept for the graphs
  Stats stats_;
};

}  // namespace ember
