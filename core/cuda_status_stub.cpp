// cuda_status() for a build without the CUDA backend (EMBER_CUDA=OFF).
#include "core/runtime.h"

namespace ember {

const CudaStatus& cuda_status() {
  static const CudaStatus status = [] {
    CudaStatus s;
    s.reason = "this Ember build has no CUDA backend (configured with EMBER_CUDA=OFF or no CUDA toolkit found)";
    return s;
  }();
  return status;
}

std::vector<LibraryVersion> cuda_library_versions() { return {}; }

}  // namespace ember
