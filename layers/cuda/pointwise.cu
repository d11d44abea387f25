// Sigmoid, tanh, LeakyReLU, GELU kernels (grid-stride loops, the function a template argument so
// each kernel's loop has no switch) and their launchers. The formulas are the CPU twin's (GELU's
// from layers/pointwise_math.h, the same code).
#include "../../core/cuda/check.h"
#include "../pointwise_math.h"
#include "pointwise.h"

namespace ember::cuda {

namespace {
using ::ember::detail::Pointwise;

// No __restrict__: the layers may call these in place (y == x, dx == dy).
template <Pointwise F>
__global__ void pointwise_forward_kernel(const float* x, float* y, float alpha, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = x[i];
    if constexpr (F == Pointwise::Sigmoid)
      y[i] = 1.0f / (1.0f + expf(-v));
    else if constexpr (F == Pointwise::Tanh)
      y[i] = tanhf(v);
    else if constexpr (F == Pointwise::Gelu)
      y[i] = ::ember::detail::gelu(v);
    else if constexpr (F == Pointwise::GeluTanh)
      y[i] = ::ember::detail::gelu_tanh(v);
    else
      y[i] = v > 0.0f ? v : alpha * v;
  }
}

// Sigmoid and tanh differentiate from the output y, LeakyReLU from the input x's sign, GELU from x.
template <Pointwise F>
__global__ void pointwise_backward_kernel(const float* x, const float* y, const float* dy, float* dx, float alpha,
                                          int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float g = dy[i];
    if constexpr (F == Pointwise::Sigmoid)
      dx[i] = g * y[i] * (1.0f - y[i]);
    else if constexpr (F == Pointwise::Tanh)
      dx[i] = g * (1.0f - y[i] * y[i]);
    else if constexpr (F == Pointwise::Gelu)
      dx[i] = g * ::ember::detail::gelu_grad(x[i]);
    else if constexpr (F == Pointwise::GeluTanh)
      dx[i] = g * ::ember::detail::gelu_tanh_grad(x[i]);
    else
      dx[i] = x[i] > 0.0f ? g : alpha * g;
  }
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096)); }

void check_pair(const Tensor& a, const Tensor& b, const Context& ctx, const char* what) {
  EMBER_CHECK(a.shape() == b.shape() && a.layout() == b.layout() && a.dtype() == DType::F32 &&
                  b.dtype() == DType::F32 && a.device() == Device::cuda(ctx.device()) && b.device() == a.device(),
              ShapeError, std::string("activation (cuda): ") + what + ": " + a.str() + " vs " + b.str());
}

template <Pointwise F>
void launch_forward(Context& ctx, float alpha, const Tensor& x, Tensor& y, int64_t n) {
  pointwise_forward_kernel<F><<<blocks_for(n), 256, 0, ctx.stream()>>>(static_cast<const float*>(x.raw()),
                                                                       static_cast<float*>(y.raw()), alpha, n);
}

template <Pointwise F>
void launch_backward(Context& ctx, float alpha, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                     int64_t n) {
  pointwise_backward_kernel<F><<<blocks_for(n), 256, 0, ctx.stream()>>>(
      static_cast<const float*>(x.raw()), static_cast<const float*>(y.raw()), static_cast<const float*>(dy.raw()),
      static_cast<float*>(dx.raw()), alpha, n);
}
}  // namespace

void pointwise_forward(Context& ctx, Pointwise f, float alpha, const Tensor& x, Tensor& y) {
  check_pair(x, y, ctx, "input and output must match");
  const int64_t n = x.numel();
  if (n == 0) return;
  switch (f) {
    case Pointwise::Sigmoid:
      launch_forward<Pointwise::Sigmoid>(ctx, alpha, x, y, n);
      break;
    case Pointwise::Tanh:
      launch_forward<Pointwise::Tanh>(ctx, alpha, x, y, n);
      break;
    case Pointwise::LeakyReLU:
      launch_forward<Pointwise::LeakyReLU>(ctx, alpha, x, y, n);
      break;
    case Pointwise::Gelu:
      launch_forward<Pointwise::Gelu>(ctx, alpha, x, y, n);
      break;
    case Pointwise::GeluTanh:
      launch_forward<Pointwise::GeluTanh>(ctx, alpha, x, y, n);
      break;
  }
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void pointwise_backward(Context& ctx, Pointwise f, float alpha, const Tensor& x, const Tensor& y, const Tensor& dy,
                        Tensor& dx) {
  check_pair(x, y, ctx, "input and output must match");
  check_pair(y, dy, ctx, "output and output gradient must match");
  check_pair(dy, dx, ctx, "output gradient and input gradient must match");
  const int64_t n = x.numel();
  if (n == 0) return;
  switch (f) {
    case Pointwise::Sigmoid:
      launch_backward<Pointwise::Sigmoid>(ctx, alpha, x, y, dy, dx, n);
      break;
    case Pointwise::Tanh:
      launch_backward<Pointwise::Tanh>(ctx, alpha, x, y, dy, dx, n);
      break;
    case Pointwise::LeakyReLU:
      launch_backward<Pointwise::LeakyReLU>(ctx, alpha, x, y, dy, dx, n);
      break;
    case Pointwise::Gelu:
      launch_backward<Pointwise::Gelu>(ctx, alpha, x, y, dy, dx, n);
      break;
    case Pointwise::GeluTanh:
      launch_backward<Pointwise::GeluTanh>(ctx, alpha, x, y, dy, dx, n);
      break;
  }
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
