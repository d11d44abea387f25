// Clipping and decay kernels (see regularize.h).
#include "../../core/cuda/check.h"
#include "regularize.h"

namespace ember::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int kBlocks = 256;  // fixed: the norm's grouping, hence its bits, never depends on n

unsigned blocks(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 2048)); }

__global__ void clip_value_kernel(float* g, int64_t n, float c) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    g[i] = g[i] > c ? c : (g[i] < -c ? -c : g[i]);
}

// Block b's sum of squares (double) into partial[b], each block over a grid-stride share.
__global__ void squares_kernel(const float* __restrict__ g, int64_t n, double* __restrict__ partial) {
  __shared__ double s[kThreads];
  double acc = 0.0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    acc += static_cast<double>(g[i]) * static_cast<double>(g[i]);
  s[threadIdx.x] = acc;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

// factor = min(1, c / sqrt(sum of the partials)) into partial[kBlocks].
__global__ void clip_factor_kernel(double* partial, float c) {
  __shared__ double s[kBlocks];
  s[threadIdx.x] = partial[threadIdx.x];
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) s[threadIdx.x] += s[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    const double norm = sqrt(s[0]);
    partial[kBlocks] = !isfinite(norm) ? nan("") : (norm > c ? c / norm : 1.0);  // non-finite: NaN (TF)
  }
}

__global__ void scale_by_kernel(float* g, int64_t n, const double* factor) {
  const float f = static_cast<float>(*factor);
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    g[i] *= f;
}

__global__ void decay_kernel(float* p, const float* mask, int64_t n, const float* rate, float weight_decay) {
  const float factor = __fmul_rn(*rate, weight_decay);  // rounded as the host's float product
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] -= mask ? factor * mask[i] * p[i] : factor * p[i];
}
}  // namespace

void clip_by_value(Context& ctx, float* g, int64_t n, float c) {
  if (n <= 0) return;
  clip_value_kernel<<<blocks(n), kThreads, 0, ctx.stream()>>>(g, n, c);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void clip_by_global_norm(Context& ctx, float* g, int64_t n, float c, double* scratch) {
  if (n <= 0) return;
  static_assert(kNormScratch == kBlocks + 1, "scratch: the partials and the factor");
  squares_kernel<<<kBlocks, kThreads, 0, ctx.stream()>>>(g, n, scratch);
  EMBER_CUDA_CHECK(cudaGetLastError());
  clip_factor_kernel<<<1, kBlocks, 0, ctx.stream()>>>(scratch, c);
  EMBER_CUDA_CHECK(cudaGetLastError());
  scale_by_kernel<<<blocks(n), kThreads, 0, ctx.stream()>>>(g, n, scratch + kBlocks);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void decay(Context& ctx, float* p, const float* mask, int64_t n, const float* lr, float weight_decay) {
  if (n <= 0) return;
  decay_kernel<<<blocks(n), kThreads, 0, ctx.stream()>>>(p, mask, n, lr, weight_decay);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
