// CudaGraph (see cuda_graph.h) over the CUDA module's graph entries.
#include "cuda_graph.h"

#include <algorithm>
#include <atomic>
#include <utility>

#include "cuda_module.h"
#include "error.h"

namespace ember {

namespace {
std::atomic<int64_t> g_captures{0};
constexpr int kDevices = 64;                  // device indices counted (more: counted as the last)
std::atomic<int> g_capturing[kDevices] = {};  // per device: captures running their work
std::atomic<int>& capturing_on(Device d) { return g_capturing[std::clamp(d.index, 0, kDevices - 1)]; }
}  // namespace

int64_t CudaGraph::captures() { return g_captures.load(std::memory_order_relaxed); }

bool CudaGraph::capturing(Device device) {
  return device.is_cuda() && capturing_on(device).load(std::memory_order_relaxed) > 0;
}

CudaGraph CudaGraph::capture(Device device, const std::function<void()>& work) {
  EMBER_CHECK(device.is_cuda(), DeviceError, "CudaGraph: capturing needs a GPU, got " + device.str());
  const auto& api = detail::require_cuda_module([&] { return "CUDA graph capture on " + device.str(); });
  api.open(device.index);
  api.graph_begin(device.index);
  capturing_on(device).fetch_add(1, std::memory_order_relaxed);
  try {
    work();
  } catch (...) {
    capturing_on(device).fetch_sub(1, std::memory_order_relaxed);
    api.graph_abort(device.index);
    throw;
  }
  capturing_on(device).fetch_sub(1, std::memory_order_relaxed);
  CudaGraph g;
  g.graph_ = api.graph_end(device.index);
  g.device_ = device;
  g_captures.fetch_add(1, std::memory_order_relaxed);
  return g;
}

CudaGraph::~CudaGraph() { reset(); }

CudaGraph::CudaGraph(CudaGraph&& other) noexcept
    : device_(other.device_), graph_(std::exchange(other.graph_, nullptr)) {}

CudaGraph& CudaGraph::operator=(CudaGraph&& other) noexcept {
  if (this != &other) {
    reset();
    device_ = other.device_;
    graph_ = std::exchange(other.graph_, nullptr);
  }
  return *this;
}

void CudaGraph::launch() {
  EMBER_CHECK(graph_ != nullptr, Error, "CudaGraph: nothing captured to launch");
  detail::require_cuda_module("CUDA graph launch").graph_launch(graph_);
}

int64_t CudaGraph::node_count() const {
  if (!graph_) return 0;
  return detail::require_cuda_module("CUDA graph nodes").graph_nodes(graph_);
}

void CudaGraph::reset() {
  if (!graph_) return;
  // A graph exists only where the module was loaded, so this lookup cannot fail.
  if (const auto* api = detail::cuda_module(nullptr)) api->graph_destroy(graph_);
  graph_ = nullptr;
}

}  // namespace ember
