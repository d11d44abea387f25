// The CUDA backend lives in its own shared module, libember_cuda, loaded with dlopen the first
// time something asks about CUDA. libember itself links no CUDA library: a CPU run does not pay
// the ~200 MB that loading cuBLAS/cuDNN costs, and a CUDA build still runs (and says why) on a
// machine where the CUDA libraries are missing altogether.
// Private to the library (not part of the API users program against).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "caching_allocator.h"
#include "runtime.h"
#include "tensor.h"

namespace ember::detail {

// The version of this table's layout and of every folder's op table reached through it. The
// module and libember must agree on it exactly: a module built from other sources is refused
// with a message naming both versions, never called through a mismatched table.
// 15: the learning rate on the device (optimizers' set_rate, rate pointers); 14: clipping, decay, RMSprop; 13: losses
// and metrics; 12: the elementwise ops of the merge layers; 11: the loss's mean over a whole batch; 10: pointwise
// activations, softmax, dropout, batch normalization and average pools; 9: relayout; 8: graphs, device step scalars;
// 7: open
inline constexpr uint32_t kCudaModuleAbi = 22;

// The module's entry points, returned by its one exported function ember_cuda_api_v1(): the
// core part (status, memory, copies, fill/scale, synchronize) and `ops`, which finds the op
// table a folder fills in its own cuda/ folder (layers/cuda_ops.h, optim/cuda_ops.h,
// data/cuda_ops.h, distribute/nccl_ops.h) by that folder's name. Core names no op: adding one
// edits only its folder's table. Functions may throw ember::Error subclasses (the module links
// libember: same types).
struct CudaModuleApi {
  uint32_t abi = 0;  // kCudaModuleAbi of the sources the module was built from
  const CudaStatus* (*status)();
  void (*versions)(std::vector<LibraryVersion>* out);
  // Device memory through the device's CachingAllocator.
  void* (*allocate)(int device, size_t bytes);
  void (*deallocate)(int device, void* p) noexcept;
  void (*set_memory_policy)(int device, const MemoryPolicy& policy);
  CachingAllocator::Stats (*memory_stats)(int device);
  // Copy of `bytes`; a device of -1 means host memory. Waited for when the host or two GPUs are
  // involved; within one GPU, ordered on its stream without a host wait.
  void (*copy)(void* dst, int dst_device, const void* src, int src_device, size_t bytes);
  // Tensor::fill and in-place scaling of an f32 tensor on its device's stream.
  void (*fill)(Tensor& t, float value);
  void (*scale)(Tensor& t, float factor);
  // Tensor::copy_from between layouts on one GPU: dst = src (same shape, dtype and device) with
  // the channel axis moved, on the device's stream.
  void (*relayout)(Tensor& dst, const Tensor& src);
  // Tensor::zero: every byte 0 (any dtype), on the device's stream.
  void (*zero)(Tensor& t);
  // Blocks until every op queued on `device` is done (and reports an asynchronous error).
  void (*synchronize)(int device);
  // How many times the host has waited for `device` (synchronize and copies with the host).
  int64_t (*host_syncs)(int device);
  // Opens `device` (its context: where a GPU another process holds in exclusive mode, or one the
  // build has no code for, shows); DeviceError saying which. Soft placement calls it.
  void (*open)(int device);
  // CUDA graphs of the work queued on `device`'s stream (core/cuda_graph.h). graph_begin starts
  // capturing (the allocator holds what the graph may use); graph_end instantiates the graph
  // (CudaError naming why when the capture failed; the capture is over either way);
  // graph_abort ends a capture whose work threw; graph_destroy waits for the graph's queued
  // replays, frees it and lets the allocator reuse its blocks.
  void (*graph_begin)(int device);
  void* (*graph_end)(int device);
  void (*graph_abort)(int device) noexcept;
  void (*graph_launch)(void* graph);
  void (*graph_destroy)(void* graph) noexcept;
  int64_t (*graph_nodes)(const void* graph);  // the captured graph's nodes (-1: unknown)
  // The op table of the folder `owner` ("layers", "optim", "data", "nccl"); null when the
  // module has none of that name (e.g. "nccl" in a build without NCCL).
  const void* (*ops)(const char* owner);
};

// Loads the module once; null when this build has none or it cannot be loaded (`why` says).
const CudaModuleApi* cuda_module(std::string* why);
// The module, or DeviceError with the reason it is not there (`what` names the operation).
const CudaModuleApi& require_cuda_module(const std::string& what);
const CudaModuleApi& require_cuda_module(const char* what);
// The same with the message made by `what()` only when it is needed: the GPU's hot paths (every
// allocation, copy, fill) build no string in the steady state.
template <class What>
requires std::is_invocable_r_v<std::string, What>
const CudaModuleApi& require_cuda_module(What&& what) {
  if (const CudaModuleApi* api = cuda_module(nullptr)) return *api;
  return require_cuda_module(std::string(what()));
}

}  // namespace ember::detail
