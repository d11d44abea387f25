// ReLU kernels (grid-stride loops) and their launchers.
#include "../../core/cuda/check.h"
#include "relu.h"

namespace ember::cuda {

namespace {
// No __restrict__: the layers call these in place (y == x, dx == dy), which restrict forbids.
__global__ void relu_forward_kernel(const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

__global__ void relu_backward_kernel(const float* y, const float* dy, float* dx, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096)); }

void check_pair(const Tensor& a, const Tensor& b, const Context& ctx, const char* what) {
  EMBER_CHECK(a.shape() == b.shape() && a.layout() == b.layout() && a.dtype() == DType::F32 &&
                  b.dtype() == DType::F32 && a.device() == Device::cuda(ctx.device()) && b.device() == a.device(),
              ShapeError, std::string("relu (cuda): ") + what + ": " + a.str() + " vs " + b.str());
}
}  // namespace

void relu_forward(Context& ctx, const Tensor& x, Tensor& y) {
  check_pair(x, y, ctx, "input and output must match");
  const int64_t n = x.numel();
  if (n == 0) return;
  relu_forward_kernel<<<blocks_for(n), 256, 0, ctx.stream()>>>(static_cast<const float*>(x.raw()),
                                                               static_cast<float*>(y.raw()), n);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void relu_backward(Context& ctx, const Tensor& y, const Tensor& dy, Tensor& dx) {
  check_pair(y, dy, ctx, "output and output gradient must match");
  check_pair(dy, dx, ctx, "output gradient and input gradient must match");
  const int64_t n = y.numel();
  if (n == 0) return;
  relu_backward_kernel<<<blocks_for(n), 256, 0, ctx.stream()>>>(
      static_cast<const float*>(y.raw()), static_cast<const float*>(dy.raw()), static_cast<float*>(dx.raw()), n);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
