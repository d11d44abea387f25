// A one-line kernel whose only job is to tell whether this build has code the current GPU can
// run (SASS for its architecture, or PTX the driver can JIT): asked once per GPU, when its
// context is made (cuda::Context), never by the status probe.
#include <cuda_runtime.h>

namespace ember::cuda {

__global__ void probe_kernel(int* out) {
  if (out) *out = 1;
}

// cudaSuccess when a kernel image for the current device exists; otherwise the CUDA error.
cudaError_t probe_kernel_image() {
  cudaFuncAttributes attr{};
  return cudaFuncGetAttributes(&attr, probe_kernel);
}

}  // namespace ember::cuda
