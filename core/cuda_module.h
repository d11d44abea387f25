// The CUDA backend lives in its own shared module, libember_cuda, loaded with dlopen the first
// time something asks about CUDA. libember itself links no CUDA library: a CPU run does not pay
// the ~200 MB that loading cuBLAS/cuDNN costs, and a CUDA build still runs (and says why) on a
// machine where the CUDA libraries are missing altogether.
// Private to the library (not part of the API users program against).
#pragma once

#include <string>
#include <vector>

#include "core/caching_allocator.h"
#include "core/runtime.h"

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
};

// Loads the module once; null when this build has none or it cannot be loaded (`why` says).
const CudaModuleApi* cuda_module(std::string* why);
// The module, or DeviceError with the reason it is not there (`what` names the operation).
const CudaModuleApi& require_cuda_module(const std::string& what);

}  // namespace ember::detail
