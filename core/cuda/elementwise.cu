// Element-wise kernels (see elementwise.h): grid-stride loops.
#include "check.h"
#include "elementwise.h"

namespace ember::cuda {

namespace {
__global__ void fill_kernel(float* __restrict__ p, int64_t n, float value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = value;
}

__global__ void scale_kernel(float* __restrict__ p, int64_t n, float factor) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] *= factor;
}

unsigned blocks(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 2048)));
}
}  // namespace

void fill(Context& ctx, float* p, int64_t n, float value) {
  if (n <= 0) return;
  fill_kernel<<<blocks(n), 256, 0, ctx.stream()>>>(p, n, value);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void scale(Context& ctx, float* p, int64_t n, float factor) {
  if (n <= 0) return;
  scale_kernel<<<blocks(n), 256, 0, ctx.stream()>>>(p, n, factor);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
