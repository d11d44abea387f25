// A one-line kernel whose only job is to tell whether this build has code the GPU can run
// (SASS for its architecture, or PTX the driver can JIT).
#include <cuda_runtime.h>

namespace ember::cuda {

__global__ void probe_kernel(int* out) {
  if (out) *out = 1;
}

// cudaSuccess when a kernel image for `device` exists; otherwise the CUDA error.
cudaError_t probe_kernel_image(int device) {
  cudaError_t err = cudaSetDevice(device);
  if (err != cudaSuccess) return err;
  cudaFuncAttributes attr{};
  return cudaFuncGetAttributes(&attr, probe_kernel);
}

}  // namespace ember::cuda
