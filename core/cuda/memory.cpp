// Device memory for the CUDA module: one CachingAllocator per device over cudaMalloc/cudaFree,
// and synchronous copies; plus the core part of the module's table (core/cuda_module.h).
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <mutex>

#include "../cuda_module.h"
#include "check.h"
#include "context.h"
#include "elementwise.h"

namespace ember {
const CudaStatus& probed_status();
std::vector<LibraryVersion> probed_versions();
}  // namespace ember

namespace ember::cuda {

namespace {
constexpr int kMaxDevices = 64;

// Makes `device` current for the scope, restoring the previous one (frees run in destructors
// on any thread, whatever device is current there).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    if (previous_ != device) EMBER_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() {
    if (previous_ >= 0) cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

struct Allocators {
  std::mutex mu;
  std::array<std::unique_ptr<CachingAllocator>, kMaxDevices> per_device;
  std::array<MemoryPolicy, kMaxDevices> policy{};
};

Allocators& allocators() {
  static Allocators* a = new Allocators();  // never destroyed: tensors may be freed at exit
  return *a;
}

void check_device(int device) {
  const CudaStatus& st = probed_status();
  if (!st.usable) throw DeviceError("cuda:" + std::to_string(device) + " is not usable: " + st.reason);
  if (device < 0 || device >= kMaxDevices ||
      std::none_of(st.gpus.begin(), st.gpus.end(), [&](const GpuInfo& g) { return g.index == device; }))
    throw DeviceError("there is no usable cuda:" + std::to_string(device));
}

CachingAllocator& allocator(int device) {
  check_device(device);
  Allocators& a = allocators();
  std::lock_guard lock(a.mu);
  auto& slot = a.per_device[static_cast<size_t>(device)];
  if (!slot) {
    auto raw_alloc = [device](size_t bytes) -> void* {
      DeviceGuard g(device);
      void* p = nullptr;
      // During a graph capture on this thread cudaMalloc counts as unsafe (it may synchronise)
      // and would end the capture; the allocation itself is not part of the graph, so it is
      // made in relaxed mode, the thread's mode restored after.
      cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
      EMBER_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
      const cudaError_t err = cudaMalloc(&p, bytes);
      (void)cudaThreadExchangeStreamCaptureMode(&mode);
      if (err == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();  // out of memory is not sticky: the allocator retries or reports
        return nullptr;
      }
      EMBER_CUDA_CHECK(err);
      return p;
    };
    auto raw_free = [device](void* p) {
      int previous = -1;
      cudaGetDevice(&previous);
      cudaSetDevice(device);
      cudaFree(p);  // frees never throw (destructors); an error here is reported by the next call
      if (previous >= 0) cudaSetDevice(previous);
    };
    slot = std::make_unique<CachingAllocator>("cuda:" + std::to_string(device), raw_alloc, raw_free,
                                              a.policy[static_cast<size_t>(device)]);
  }
  return *slot;
}

void* allocate(int device, size_t bytes) { return allocator(device).allocate(bytes); }

void deallocate(int device, void* p) noexcept {
  if (device < 0 || device >= kMaxDevices) return;
  Allocators& a = allocators();
  CachingAllocator* alloc = nullptr;
  {
    std::lock_guard lock(a.mu);
    alloc = a.per_device[static_cast<size_t>(device)].get();
  }
  if (alloc) alloc->deallocate(p);
}

void set_memory_policy(int device, const MemoryPolicy& policy) {
  check_device(device);
  Allocators& a = allocators();
  std::lock_guard lock(a.mu);
  auto& slot = a.per_device[static_cast<size_t>(device)];
  if (slot && slot->stats().in_use > 0)
    throw ArgumentError("cuda:" + std::to_string(device) +
                        ": the memory policy must be set before tensors are allocated");
  slot.reset();  // rebuilt with the new policy on the next allocation (its cache is released)
  a.policy[static_cast<size_t>(device)] = policy;
}

CachingAllocator::Stats memory_stats(int device) { return allocator(device).stats(); }

void copy(void* dst, int dst_device, const void* src, int src_device, size_t bytes) {
  if (bytes == 0) return;
  const int device = dst_device >= 0 ? dst_device : src_device;
  DeviceGuard g(device);
  if (src_device >= 0 && src_device != device) context(src_device).synchronize();  // producer on another GPU
  // On the device's own stream, so the copy is ordered after the kernels that produced the data
  // (the context's stream does not synchronise with the legacy default stream). Unified
  // addressing lets the runtime tell host from device pointers (cudaMemcpyDefault).
  Context& ctx = context(device);
  EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, ctx.stream()));
  // Within one GPU the copy stays in stream order, like a kernel: no host wait (the caching
  // allocator is stream-ordered, so neither buffer can be reused before the copy ran). With the
  // host, or another GPU, the copy is waited for: the caller reads or frees the memory next.
  if (src_device < 0 || dst_device < 0 || src_device != dst_device) ctx.synchronize();
}

// A captured graph, ready to replay on its device's stream.
struct Graph {
  int device;
  cudaGraphExec_t exec;
  int64_t nodes;  // kernels, copies, memsets... as captured (-1: cudaGraphGetNodes failed)
};

void graph_begin(int device) {
  Context& ctx = context(device);
  CachingAllocator& alloc = allocator(device);
  alloc.begin_capture();
  // Thread-local: only this thread's unsafe calls (a host wait, cudaFree) break the capture.
  // The device has one stream: work another thread queues on it meanwhile would be captured
  // too (and not run), so nothing else may use the device during a capture (CudaGraph says so).
  const cudaError_t err = cudaStreamBeginCapture(ctx.stream(), cudaStreamCaptureModeThreadLocal);
  if (err != cudaSuccess) {
    alloc.abort_capture();
    EMBER_CUDA_CHECK(err);
  }
}

void graph_abort(int device) noexcept {
  try {
    Context& ctx = context(device);
    cudaGraph_t graph = nullptr;
    if (cudaStreamEndCapture(ctx.stream(), &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    allocator(device).abort_capture();
  } catch (...) {  // graph_begin succeeded, so neither lookup can fail now
  }
}

void* graph_end(int device) {
  Context& ctx = context(device);
  CachingAllocator& alloc = allocator(device);
  cudaGraph_t graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(ctx.stream(), &graph);
  if (end != cudaSuccess || !graph) {
    alloc.abort_capture();
    (void)cudaGetLastError();
    throw CudaError("capturing a CUDA graph on cuda:" + std::to_string(device) + " failed: " + cudaGetErrorName(end) +
                    ": " + cudaGetErrorString(end) +
                    " (the captured work waited for the host, freed memory or used another stream)");
  }
  // The node count is a diagnostic (CudaGraph::node_count): a failure to read it is reported as
  // -1 there, not as a failed capture.
  size_t nodes = 0;
  const bool counted = cudaGraphGetNodes(graph, nullptr, &nodes) == cudaSuccess;
  if (!counted) (void)cudaGetLastError();
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (inst != cudaSuccess) {
    alloc.abort_capture();
    (void)cudaGetLastError();
    throw CudaError("instantiating a CUDA graph on cuda:" + std::to_string(device) +
                    " failed: " + cudaGetErrorName(inst) + ": " + cudaGetErrorString(inst));
  }
  try {
    alloc.end_capture();
  } catch (...) {
    cudaGraphExecDestroy(exec);
    alloc.abort_capture();
    throw;
  }
  try {
    return new Graph{device, exec, counted ? static_cast<int64_t>(nodes) : -1};
  } catch (...) {
    cudaGraphExecDestroy(exec);
    alloc.release_graph();
    throw;
  }
}

void graph_launch(void* g) {
  auto* graph = static_cast<Graph*>(g);
  EMBER_CUDA_CHECK(cudaGraphLaunch(graph->exec, context(graph->device).stream()));
}

void graph_destroy(void* g) noexcept {
  auto* graph = static_cast<Graph*>(g);
  if (!graph) return;
  try {
    Context& ctx = context(graph->device);
    (void)cudaStreamSynchronize(ctx.stream());  // no replay of it is queued any more
  } catch (...) {                               // the device is gone: nothing can still run
  }
  cudaGraphExecDestroy(graph->exec);
  Allocators& a = allocators();
  {
    std::lock_guard lock(a.mu);
    if (auto& alloc = a.per_device[static_cast<size_t>(graph->device)]) alloc->release_graph();
  }
  delete graph;
}

const CudaStatus* status() { return &probed_status(); }
void versions(std::vector<LibraryVersion>* out) { *out = probed_versions(); }

}  // namespace

size_t allocator_headroom(int device) {
  CachingAllocator& a = allocator(device);
  const CachingAllocator::Stats s = a.stats();
  const size_t limit = a.policy().limit_bytes, in_use = s.in_use + s.graph_held;
  if (limit == 0) return SIZE_MAX;
  return limit > in_use ? limit - in_use : 0;
}

void fill_core_entries(::ember::detail::CudaModuleApi& api) {
  api.status = status;
  api.versions = versions;
  api.allocate = allocate;
  api.deallocate = deallocate;
  api.set_memory_policy = set_memory_policy;
  api.memory_stats = memory_stats;
  api.copy = copy;
  api.fill = [](Tensor& t, float value) {
    EMBER_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::F64, ArgumentError,
                "fill: f32 or f64 only, got " + t.str());
    if (t.dtype() == DType::F64)
      fill(context_of(t), static_cast<double*>(t.raw()), t.numel(), static_cast<double>(value));
    else
      fill(context_of(t), static_cast<float*>(t.raw()), t.numel(), value);
  };
  api.scale = [](Tensor& t, float factor) {
    EMBER_CHECK(t.dtype() == DType::F32, ArgumentError, "scale: f32 only, got " + t.str());
    scale(context_of(t), static_cast<float*>(t.raw()), t.numel(), factor);
  };
  api.relayout = [](Tensor& dst, const Tensor& src) {
    EMBER_CHECK(dst.rank() == 4 && src.shape() == dst.shape() && src.dtype() == dst.dtype() &&
                    src.device() == dst.device() && src.layout() != dst.layout() && src.raw() != dst.raw(),
                ArgumentError, "relayout: " + src.str() + " into " + dst.str());
    permute_nchw(context_of(dst), src.raw(), dst.raw(), dst.dim(0), dst.dim(1), dst.dim(2), dst.dim(3),
                 static_cast<int>(dtype_size(dst.dtype())), dst.layout() == Layout::NHWC);
  };
  api.zero = [](Tensor& t) {
    const size_t bytes = static_cast<size_t>(t.numel()) * dtype_size(t.dtype());
    if (bytes > 0) EMBER_CUDA_CHECK(cudaMemsetAsync(t.raw(), 0, bytes, context_of(t).stream()));
  };
  api.synchronize = [](int device) { context(device).synchronize(); };
  api.host_syncs = [](int device) -> int64_t { return context(device).host_syncs(); };
  api.open = [](int device) { context(device); };
  api.graph_begin = graph_begin;
  api.graph_end = graph_end;
  api.graph_abort = graph_abort;
  api.graph_launch = graph_launch;
  api.graph_destroy = graph_destroy;
  api.graph_nodes = [](const void* g) { return static_cast<const Graph*>(g)->nodes; };
}

}  // namespace ember::cuda
