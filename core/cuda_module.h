// The CUDA backend lives in its own shared module, libember_cuda, loaded with dlopen the first
// time something asks about CUDA. libember itself links no CUDA library: a CPU run does not pay
// the ~200 MB that loading cuBLAS/cuDNN costs, and a CUDA build still runs (and says why) on a
// machine where the CUDA libraries are missing altogether.
// Private to the library (not installed).
#pragma once

#include <string>
#include <vector>

#include "core/runtime.h"

namespace ember::detail {

// The module's entry points (extern "C", versioned by name).
struct CudaModule {
  const CudaStatus* (*status)() = nullptr;
  void (*versions)(std::vector<LibraryVersion>*) = nullptr;
};

// Loads the module once; null when this build has none or it cannot be loaded (`why` says).
const CudaModule* cuda_module(std::string* why);

}  // namespace ember::detail
