// The merge layers' elementwise kernels (grid-stride loops; the op a template argument, so no
// switch in the loop) and their launchers. The formulas are the CPU twin's.
#include "../../core/cuda/check.h"
#include "elementwise.h"

namespace ember::cuda {

namespace {
using ::ember::detail::BinaryOp;

// No __restrict__: callers pass y == a (a running sum) and dx == dy.
template <BinaryOp Op>
__global__ void binary_kernel(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if constexpr (Op == BinaryOp::Add)
      y[i] = a[i] + b[i];
    else if constexpr (Op == BinaryOp::Subtract)
      y[i] = a[i] - b[i];
    else if constexpr (Op == BinaryOp::Multiply)
      y[i] = a[i] * b[i];
    else
      y[i] = b[i] > a[i] ? b[i] : a[i];
  }
}

__global__ void scale_kernel(float alpha, const float* x, float* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = alpha * x[i];
}

__global__ void maximum_grad_kernel(const float* x, const float* y, const float* dy, float* claimed, float* dx,
                                    int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const bool mine = claimed[i] == 0.0f && x[i] == y[i];
    dx[i] = mine ? dy[i] : 0.0f;
    if (mine) claimed[i] = 1.0f;
  }
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096)); }

void check_same(const Tensor& a, const Tensor& b, const Context& ctx, const char* what) {
  EMBER_CHECK(a.shape() == b.shape() && a.layout() == b.layout() && a.dtype() == DType::F32 &&
                  b.dtype() == DType::F32 && a.device() == Device::cuda(ctx.device()) && b.device() == a.device(),
              ShapeError, std::string("elementwise (cuda): ") + what + ": " + a.str() + " vs " + b.str());
}

const float* in(const Tensor& t) { return static_cast<const float*>(t.raw()); }
float* out(Tensor& t) { return static_cast<float*>(t.raw()); }

template <BinaryOp Op>
void launch_binary(Context& ctx, const Tensor& a, const Tensor& b, Tensor& y, int64_t n) {
  binary_kernel<Op><<<blocks_for(n), 256, 0, ctx.stream()>>>(in(a), in(b), out(y), n);
}
}  // namespace

void binary(Context& ctx, BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y) {
  check_same(a, b, ctx, "the inputs must match");
  check_same(a, y, ctx, "the output must match the inputs");
  const int64_t n = a.numel();
  if (n == 0) return;
  switch (op) {
    case BinaryOp::Add:
      launch_binary<BinaryOp::Add>(ctx, a, b, y, n);
      break;
    case BinaryOp::Subtract:
      launch_binary<BinaryOp::Subtract>(ctx, a, b, y, n);
      break;
    case BinaryOp::Multiply:
      launch_binary<BinaryOp::Multiply>(ctx, a, b, y, n);
      break;
    case BinaryOp::Maximum:
      launch_binary<BinaryOp::Maximum>(ctx, a, b, y, n);
      break;
  }
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void scale(Context& ctx, float alpha, const Tensor& x, Tensor& y) {
  check_same(x, y, ctx, "the output must match the input");
  const int64_t n = x.numel();
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), 256, 0, ctx.stream()>>>(alpha, in(x), out(y), n);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void maximum_grad(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& claimed, Tensor& dx) {
  check_same(x, y, ctx, "the input must match the output");
  check_same(y, dy, ctx, "the output gradient must match the output");
  check_same(y, claimed, ctx, "the claims must match the output");
  check_same(y, dx, ctx, "the input gradient must match the output");
  const int64_t n = x.numel();
  if (n == 0) return;
  maximum_grad_kernel<<<blocks_for(n), 256, 0, ctx.stream()>>>(in(x), in(y), in(dy), out(claimed), out(dx), n);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void copy_columns(Context& ctx, const Tensor& src, int64_t src_stride, int64_t src_offset, Tensor& dst,
                  int64_t dst_stride, int64_t dst_offset, int64_t rows, int64_t cols) {
  EMBER_CHECK(src.device() == Device::cuda(ctx.device()) && dst.device() == src.device() && src.dtype() == DType::F32 &&
                  dst.dtype() == DType::F32 && rows >= 0 && cols >= 0 && src_offset + cols <= src_stride &&
                  dst_offset + cols <= dst_stride && rows * src_stride <= src.numel() &&
                  rows * dst_stride <= dst.numel(),
              ShapeError, "copy_columns (cuda): the blocks do not fit " + src.str() + " -> " + dst.str());
  if (rows == 0 || cols == 0) return;
  constexpr size_t f = sizeof(float);
  EMBER_CUDA_CHECK(cudaMemcpy2DAsync(out(dst) + dst_offset, static_cast<size_t>(dst_stride) * f, in(src) + src_offset,
                                     static_cast<size_t>(src_stride) * f, static_cast<size_t>(cols) * f,
                                     static_cast<size_t>(rows), cudaMemcpyDeviceToDevice, ctx.stream()));
}

}  // namespace ember::cuda
