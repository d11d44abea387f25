// Bias + activation and column sums for the GPU Dense layer.
#include "../../core/cuda/check.h"
#include "dense_kernels.h"

namespace ember::cuda {

namespace {
__global__ void bias_activation_kernel(float* __restrict__ y, const float* __restrict__ bias, int64_t rows, int cols,
                                       bool relu) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < rows * cols;
       e += int64_t(gridDim.x) * blockDim.x) {
    const float v = y[e] + bias[e % cols];
    y[e] = relu ? fmaxf(v, 0.0f) : v;
  }
}

// One thread per column; rows summed in order, as the CPU loop does.
__global__ void column_sums_kernel(const float* __restrict__ m, float* __restrict__ out, int rows, int cols) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  float s = 0.0f;
  for (int i = 0; i < rows; ++i) s += m[static_cast<int64_t>(i) * cols + j];
  out[j] = s;
}
}  // namespace

void bias_activation(Context& ctx, float* y, const float* bias, int rows, int cols, bool relu) {
  const int64_t n = static_cast<int64_t>(rows) * cols;
  if (n == 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
  bias_activation_kernel<<<blocks, 256, 0, ctx.stream()>>>(y, bias, rows, cols, relu);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void column_sums(Context& ctx, const float* m, float* out, int rows, int cols) {
  if (cols == 0) return;
  column_sums_kernel<<<(cols + 127) / 128, 128, 0, ctx.stream()>>>(m, out, rows, cols);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
