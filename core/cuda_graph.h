/// @file
/// CudaGraph: the work a callable queues on one GPU, captured once and replayed with one launch
/// (CUDA graphs). A training step of about 45 small kernels and library calls (the reference CNN) costs ~100 us of
/// launches on the host; a replay costs one. Model::fit uses it with
/// FitOptions::cuda_graphs; custom loops may too.
///
/// What can be captured: work that queues on the device's stream and never waits for the host
/// (no loss read back, no copy from host memory, no allocation that must call cudaFree). What a
/// replay sees: the same kernels with the same arguments, so every value that changes from step
/// to step must live in device memory (Ember's gather cursor and Adam's step count do), and every
/// buffer the work touches must stay where it was: the device's caching allocator holds every
/// block the graph may use until the graph is destroyed, so buffers freed meanwhile (a short last
/// batch re-shaping the layers' outputs) are never handed to other work. A device has one stream,
/// so while a capture runs no other thread may queue work on that device (it would land in the
/// graph instead of running).
#pragma once

#include <cstdint>
#include <functional>

#include "device.h"

namespace ember {

/// A captured CUDA graph on one device, replayed by launch() (see cuda_graph.h).
/// Move-only.
class CudaGraph {
 public:
  /// An empty graph (captured() is false).
  CudaGraph() = default;
  /// Runs `work` under capture on `device` (nothing executes yet) and instantiates the graph.
  /// If `work` throws, or the capture fails, the capture ends and the error propagates (a
  /// CudaError names the cause); DeviceError without a usable GPU.
  static CudaGraph capture(Device device, const std::function<void()>& work);
  ~CudaGraph();  ///< waits for queued replays; never throws
  /// Takes `other`'s graph; `other` is left empty.
  CudaGraph(CudaGraph&& other) noexcept;
  /// Destroys this graph (reset()), then takes `other`'s; `other` is left empty.
  CudaGraph& operator=(CudaGraph&& other) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  bool captured() const { return graph_ != nullptr; }  ///< Whether it holds a graph.
  Device device() const { return device_; }            ///< The device it was captured on.
  /// The nodes of the captured work (each kernel, library kernel, copy and memset is one): the
  /// launches one eager run of the same work makes. 0 when nothing is captured, -1 when CUDA
  /// could not say.
  int64_t node_count() const;
  /// Queues one replay on the device's stream; returns without waiting.
  void launch();
  /// Graphs captured so far in this process (a diagnostic, as gpu_host_syncs: fit captures its
  /// step once per fit unless the optimizer or its state is replaced).
  static int64_t captures();
  /// Whether a capture() on `device` is running its work now (any thread): what must not be
  /// queued then (a value written once, such as an optimizer's learning rate) can refuse.
  static bool capturing(Device device);
  void reset();  ///< destroys the graph (waiting for its replays)

 private:
  Device device_ = Device::cpu();
  void* graph_ = nullptr;  // the CUDA module's instantiated graph
};

}  // namespace ember
