// Bias + activation and column sums for the GPU Dense layer.
#include "../../core/cuda/check.h"
#include "dense_kernels.h"

namespace ember::cuda {

namespace {
// Rows over blockIdx.y, columns over the x threads: each thread knows its column without a
// 64-bit division per element.
__global__ void bias_activation_kernel(float* __restrict__ y, const float* __restrict__ bias, int rows, int cols,
                                       bool relu) {
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    float* row = y + static_cast<int64_t>(r) * cols;
    for (int c = blockIdx.x * blockDim.x + threadIdx.x; c < cols; c += gridDim.x * blockDim.x) {
      const float v = row[c] + bias[c];
      row[c] = relu ? fmaxf(v, 0.0f) : v;
    }
  }
}

// Column sums (the bias gradient): a block owns 32 adjacent columns (coalesced reads across a
// warp); its 16 thread rows each sum every 16th row, then the 16 partial sums of a column are
// added in a fixed tree order. No atomics: the same bits every run. (One thread per column
// made Dense(10) run on 10 threads, each walking every row in turn.)
constexpr int kCols = 32, kRowThreads = 16;
__global__ void column_sums_kernel(const float* __restrict__ m, float* __restrict__ out, int rows, int cols) {
  __shared__ float partial[kRowThreads][kCols + 1];  // +1: no bank conflicts in the reduction
  const int j = blockIdx.x * kCols + threadIdx.x;
  float s = 0.0f;
  if (j < cols)
    for (int i = threadIdx.y; i < rows; i += kRowThreads) s += m[static_cast<int64_t>(i) * cols + j];
  partial[threadIdx.y][threadIdx.x] = s;
  __syncthreads();
  for (int stride = kRowThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.y < stride) partial[threadIdx.y][threadIdx.x] += partial[threadIdx.y + stride][threadIdx.x];
    __syncthreads();
  }
  if (threadIdx.y == 0 && j < cols) out[j] = partial[0][threadIdx.x];
}
}  // namespace

void bias_activation(Context& ctx, float* y, const float* bias, int rows, int cols, bool relu) {
  if (rows == 0 || cols == 0) return;
  constexpr int kThreads = 128;
  const dim3 grid(static_cast<unsigned>(std::min((cols + kThreads - 1) / kThreads, 64)),
                  static_cast<unsigned>(std::min(rows, 65535)));
  bias_activation_kernel<<<grid, kThreads, 0, ctx.stream()>>>(y, bias, rows, cols, relu);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void column_sums(Context& ctx, const float* m, float* out, int rows, int cols) {
  if (cols == 0) return;
  column_sums_kernel<<<(cols + kCols - 1) / kCols, dim3(kCols, kRowThreads), 0, ctx.stream()>>>(m, out, rows, cols);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
