// The CUDA backend lives in its own shared module, libember_cuda, loaded with dlopen the first
// time something asks about CUDA. libember itself links no CUDA library: a CPU run does not pay
// the ~200 MB that loading cuBLAS/cuDNN costs, and a CUDA build still runs (and says why) on a
// machine where the CUDA libraries are missing altogether.
// Private to the library (not part of the API users program against).
#pragma once

#include <string>
#include <vector>

#include "caching_allocator.h"
#include "runtime.h"
#include "tensor.h"
#include "../layers/op_shapes.h"

namespace ember::detail {

// The module's entry points, returned by its one exported function ember_cuda_api_v1().
// Functions may throw ember::Error subclasses (the module links libember: same types).
struct CudaModuleApi {
  const CudaStatus* (*status)();
  void (*versions)(std::vector<LibraryVersion>* out);
  // Device memory through the device's CachingAllocator.
  void* (*allocate)(int device, size_t bytes);
  void (*deallocate)(int device, void* p) noexcept;
  void (*set_memory_policy)(int device, const MemoryPolicy& policy);
  CachingAllocator::Stats (*memory_stats)(int device);
  // Synchronous copy of `bytes`; a device of -1 means host memory.
  void (*copy)(void* dst, int dst_device, const void* src, int src_device, size_t bytes);

  // The ops (layers/cuda, optim/cuda) on the stream of the tensors' device; same contracts as
  // their ember::cpu twins, activations row-major (NCHW).
  void (*conv2d_forward)(const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
  void (*conv2d_backward)(const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy,
                          Tensor* dx, Tensor& dw, Tensor& db, bool dy_premasked);
  std::string (*conv2d_kernel_info)(int device, const Conv2dShape& g);
  void (*maxpool2d_forward)(const Pool2dShape& g, const Tensor& x, Tensor& y);
  void (*maxpool2d_backward)(const Pool2dShape& g, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                             bool relu_input);
  void (*dense_forward)(const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Tensor& y);
  void (*dense_backward)(const Tensor& x, const Tensor& w, const Tensor& y, Tensor& dy, bool relu, Tensor* dx,
                         Tensor& dw, Tensor& db);
  void (*matmul)(const Tensor& a, const Tensor& b, Tensor& c);
  void (*relu_forward)(const Tensor& x, Tensor& y);
  void (*relu_backward)(const Tensor& y, const Tensor& dy, Tensor& dx);
  float (*softmax_xent_forward)(const Tensor& logits, const Tensor& labels, Tensor& probs);
  void (*softmax_xent_backward)(const Tensor& probs, const Tensor& labels, Tensor& dlogits);
  int64_t (*count_correct)(const Tensor& logits, const Tensor& labels);
  void (*softmax_xent_accumulate)(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& sums);
  void (*sgd_update)(int device, float* p, const float* g, float* velocity, int64_t n, float lr, float momentum,
                     bool nesterov);
  // Tensor::fill and in-place scaling of an f32 tensor on its device's stream.
  void (*fill)(Tensor& t, float value);
  void (*scale)(Tensor& t, float factor);
  // The DataLoader's batch from a device-resident dataset (data/cuda/gather.h).
  void (*gather_batch)(const Tensor& images, const Tensor& labels, const Tensor& order, int64_t offset, int64_t count,
                       Tensor& x, Tensor& y);
  // Blocks until every op queued on `device` is done (and reports an asynchronous error).
  void (*synchronize)(int device);

  // NCCL (distribute/cuda/nccl.cpp); null in a build without NCCL. Communicators are opaque
  // handles owned by the caller (nccl_destroy). Collectives are queued on each buffer's device
  // stream, one group for all the given local members; waits are bounded by timeout_ms and
  // throw CollectiveError (timeout) or NcclError (asynchronous failure) after aborting.
  void (*nccl_init_all)(const std::vector<int>& devices, std::vector<void*>* comms);
  void (*nccl_unique_id)(std::string* id);
  void* (*nccl_init_rank)(const std::string& id, int nranks, int rank, int device, int64_t timeout_ms);
  void (*nccl_destroy)(void* comm) noexcept;
  void (*nccl_abort)(void* comm) noexcept;
  void (*nccl_all_reduce_sum)(const std::vector<void*>& comms, const std::vector<Tensor*>& bufs, int64_t timeout_ms);
  void (*nccl_broadcast)(const std::vector<void*>& comms, const std::vector<Tensor*>& bufs, int root,
                         int64_t timeout_ms);
  void (*nccl_wait)(const std::vector<void*>& comms, int64_t timeout_ms);
  double (*nccl_busy_seconds)(void* comm);  // device time of its collectives waited for so far
  void (*adam_update)(int device, float* p, const float* g, float* m, float* v, int64_t n, float lr_t, float beta1,
                      float beta2, float epsilon);
};

// Loads the module once; null when this build has none or it cannot be loaded (`why` says).
const CudaModuleApi* cuda_module(std::string* why);
// The module, or DeviceError with the reason it is not there (`what` names the operation).
const CudaModuleApi& require_cuda_module(const std::string& what);

}  // namespace ember::detail
