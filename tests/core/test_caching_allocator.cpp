// The caching allocator over a counting malloc: reuse, the cap, release-and-retry, the OOM
// message, and limit parsing. (On a GPU the same class runs over cudaMalloc.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "core/caching_allocator.h"
#include "core/error.h"

namespace ember {
namespace {

struct FakeDevice {
  size_t capacity = SIZE_MAX, used = 0;
  std::map<void*, size_t> live;
  CachingAllocator::RawAlloc alloc() {
    return [this](size_t n) -> void* {
      if (used + n > capacity) return nullptr;
      void* p = std::malloc(n);
      used += n;
      live.emplace(p, n);
      return p;
    };
  }
  CachingAllocator::RawFree free() {
    return [this](void* p) {
      used -= live.at(p);
      live.erase(p);
      std::free(p);
    };
  }
};

TEST(CachingAllocator, ReusesFreedBlocksSoTheSteadyStateAllocatesNothing) {
  FakeDevice dev;
  CachingAllocator a("fake:0", dev.alloc(), dev.free());
  for (int step = 0; step < 10; ++step) {  // a "training step" allocating the same sizes
    void* x = a.allocate(1000);
    void* y = a.allocate(70000);
    a.deallocate(x);
    a.deallocate(y);
  }
  const auto s = a.stats();
  EXPECT_EQ(s.raw_allocs, 2u);
  EXPECT_EQ(s.cache_hits, 18u);
  EXPECT_EQ(s.in_use, 0u);
  EXPECT_EQ(s.cached, 1024u + 70144u);  // rounded to 512-byte multiples
  EXPECT_EQ(s.peak_in_use, 1024u + 70144u);
  a.release_cached();
  EXPECT_TRUE(dev.live.empty());
}

TEST(CachingAllocator, DoesNotHandOutBlocksFarLargerThanTheRequest) {
  FakeDevice dev;
  CachingAllocator a("fake:0", dev.alloc(), dev.free());
  a.deallocate(a.allocate(1 << 20));
  void* small = a.allocate(1000);  // the cached 1 MiB block is too big to waste on 1 KB
  EXPECT_EQ(a.stats().raw_allocs, 2u);
  a.deallocate(small);
}

TEST(CachingAllocator, CapIsRespectedAndTheErrorSaysWhy) {
  FakeDevice dev;
  CachingAllocator a("cuda:0", dev.alloc(), dev.free(), MemoryPolicy::limit("8KiB"));
  void* p = a.allocate(6000);
  try {
    a.allocate(4000);
    FAIL() << "expected OutOfMemoryError";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("cuda:0"), std::string::npos) << m;
    EXPECT_NE(m.find("requested 4.0 KiB"), std::string::npos) << m;
    EXPECT_NE(m.find("in use 6.0 KiB"), std::string::npos) << m;
    EXPECT_NE(m.find("limit 8.0 KiB"), std::string::npos) << m;
  }
  a.deallocate(p);
  EXPECT_LE(dev.used, 8192u);
}

TEST(CachingAllocator, ReleasesTheCacheToFitUnderTheCapOrTheDevice) {
  FakeDevice dev;
  CachingAllocator capped("fake:0", dev.alloc(), dev.free(), MemoryPolicy::limit("10KiB"));
  capped.deallocate(capped.allocate(8192));  // 8 KiB cached
  void* p = capped.allocate(3000);           // 3 KiB: too small for the cached block, and
                                             // 8 + 3 KiB > 10 KiB: the cache goes first
  EXPECT_EQ(capped.stats().cached, 0u);
  EXPECT_EQ(capped.stats().raw_frees, 1u);
  capped.deallocate(p);

  FakeDevice small;
  small.capacity = 12 * 1024;
  CachingAllocator grow("fake:1", small.alloc(), small.free());
  grow.deallocate(grow.allocate(8192));
  void* q = grow.allocate(8192 + 2048);  // no cap, but the device is full until the cache goes
  EXPECT_NE(q, nullptr);
  grow.deallocate(q);
  EXPECT_THROW(grow.allocate(64 * 1024), OutOfMemoryError);  // larger than the device
}

// Under the cap only as much of the cache goes as the request needs, largest blocks first: the
// small blocks a training step reuses stay cached (each free is a device-wide sync on a GPU).
TEST(CachingAllocator, UnderTheCapFreesTheLargestCachedBlocksOnlyUntilTheRequestFits) {
  FakeDevice dev;
  CachingAllocator capped("fake:0", dev.alloc(), dev.free(), MemoryPolicy::limit("20KiB"));
  void* big = capped.allocate(8192);
  void* small1 = capped.allocate(1024);
  void* small2 = capped.allocate(1024);
  capped.deallocate(big);
  capped.deallocate(small1);
  capped.deallocate(small2);             // cached: 8 + 1 + 1 KiB
  void* p = capped.allocate(12 * 1024);  // 10 + 12 > 20 KiB: the 8 KiB block alone is enough to go
  EXPECT_EQ(capped.stats().raw_frees, 1u);
  EXPECT_EQ(capped.stats().cached, 2048u);
  const size_t hits = capped.stats().cache_hits;
  capped.deallocate(capped.allocate(1024));  // a small block is still there for the step
  EXPECT_EQ(capped.stats().cache_hits, hits + 1);
  capped.deallocate(p);
}

TEST(MemoryPolicy, ParsesLimitsAndFractions) {
  EXPECT_EQ(MemoryPolicy::limit("4096").limit_bytes, 4096u);
  EXPECT_EQ(MemoryPolicy::limit("512MiB").limit_bytes, 512u << 20);
  EXPECT_EQ(MemoryPolicy::limit("1.5GiB").limit_bytes, 3u << 29);
  EXPECT_EQ(MemoryPolicy::limit("300MB").limit_bytes, 300000000u);
  for (const char* bad : {"", "abc", "-1GiB", "0", "12 GiB", "3TB", "nanGiB"})
    EXPECT_THROW(MemoryPolicy::limit(bad), ArgumentError) << bad;
  EXPECT_EQ(MemoryPolicy::fraction(0.5, 1000).limit_bytes, 500u);
  EXPECT_THROW(MemoryPolicy::fraction(0.0, 1000), ArgumentError);
  EXPECT_THROW(MemoryPolicy::fraction(1.5, 1000), ArgumentError);
  EXPECT_EQ(MemoryPolicy{}.str(), "grow");
}

// CUDA graphs replay the addresses they were captured with: while a graph lives, no block it
// may touch may serve another request. Here "the graph" is any capture; what it touches is
// every block live at its end or freed during it.
TEST(CachingAllocator, BlocksAGraphMayUseAreHeldUntilTheGraphIsReleased) {
  FakeDevice dev;
  CachingAllocator a("fake:0", dev.alloc(), dev.free());
  void* params = a.allocate(4096);      // lives for ever (parameters)
  void* activation = a.allocate(8192);  // the full batch's activation, replaced later
  void* before = a.allocate(65536);
  a.deallocate(before);  // cached before the capture: free for anyone
  a.begin_capture();
  void* temp = a.allocate(1000);  // allocated and freed inside the captured step
  a.deallocate(temp);
  void* temp2 = a.allocate(1000);  // not the held block: the graph's frees stay its own
  EXPECT_NE(temp2, temp);
  a.end_capture();
  // The short last batch runs eagerly: its buffers replace the full batch's.
  a.deallocate(activation);
  void* short_act = a.allocate(8192);
  EXPECT_NE(short_act, activation);
  EXPECT_NE(short_act, temp);
  void* other = a.allocate(1000);
  EXPECT_NE(other, temp);
  EXPECT_NE(other, temp2);
  EXPECT_EQ(a.stats().graph_held, 8192u + 1024u);
  void* big = a.allocate(65536);
  EXPECT_EQ(big, before);
  // A block allocated after the capture is the eager work's own: reused as usual.
  a.deallocate(short_act);
  EXPECT_EQ(a.allocate(8192), short_act);
  // Released: the held blocks serve requests again, nothing was given back to the device.
  a.release_graph();
  EXPECT_EQ(a.stats().graph_held, 0u);
  const size_t raw = a.stats().raw_allocs;
  void* again = a.allocate(8192);
  EXPECT_EQ(again, activation);
  EXPECT_EQ(a.stats().raw_allocs, raw);
  a.deallocate(temp2);  // freed after the release: an ordinary free
  EXPECT_EQ(a.stats().graph_held, 0u);
  for (void* p : {params, short_act, other, again, big}) a.deallocate(p);
  a.release_cached();
  EXPECT_TRUE(dev.live.empty());
}

TEST(CachingAllocator, AFailedCaptureHoldsNothingAndTwoGraphsHoldUntilTheLastIsReleased) {
  FakeDevice dev;
  CachingAllocator a("fake:0", dev.alloc(), dev.free());
  a.begin_capture();
  void* t = a.allocate(1000);
  a.deallocate(t);
  EXPECT_EQ(a.stats().graph_held, 1024u);
  a.abort_capture();  // no graph came of it
  EXPECT_EQ(a.stats().graph_held, 0u);
  EXPECT_EQ(a.allocate(1000), t);
  a.begin_capture();
  EXPECT_THROW(a.begin_capture(), Error);  // one capture at a time per device
  a.end_capture();
  a.begin_capture();
  a.end_capture();
  a.deallocate(t);
  a.release_graph();  // one graph still lives
  EXPECT_EQ(a.stats().graph_held, 1024u);
  void* other = a.allocate(1000);
  EXPECT_NE(other, t);
  a.release_graph();
  EXPECT_EQ(a.stats().graph_held, 0u);
  EXPECT_EQ(a.stats().cached, 1024u);
  a.deallocate(other);
}

TEST(CachingAllocator, HeldBlocksCountAgainstTheCap) {
  FakeDevice dev;
  MemoryPolicy cap;
  cap.limit_bytes = 16384;
  CachingAllocator a("fake:0", dev.alloc(), dev.free(), cap);
  void* x = a.allocate(8192);
  a.begin_capture();
  a.end_capture();
  a.deallocate(x);  // held for the graph: not free, not reusable
  EXPECT_THROW(a.allocate(12288), OutOfMemoryError);
  a.release_graph();
  void* y = a.allocate(12288);  // the cached block is given back to make room
  a.deallocate(y);
  // During a capture nothing goes back to the device (a free would end the capture): a request
  // over the cap fails, saying so, and the cached block stays.
  void* z = a.allocate(4096);
  a.deallocate(z);
  const size_t frees = a.stats().raw_frees;
  a.begin_capture();
  try {
    a.allocate(16384);
    ADD_FAILURE() << "no error";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("during a graph capture"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a.stats().raw_frees, frees);
  a.abort_capture();
}

}  // namespace
}  // namespace ember
