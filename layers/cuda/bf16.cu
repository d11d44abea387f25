// bfloat16 conversion kernels (grid-stride loops) and their launchers.
#include <cuda_bf16.h>

#include <algorithm>

#include "../../core/cuda/check.h"
#include "bf16.h"

namespace ember::cuda {

namespace {
__global__ void to_bf16_kernel(const float* __restrict__ src, __nv_bfloat16* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16_rn(src[i]);
}

__global__ void from_bf16_kernel(const __nv_bfloat16* __restrict__ src, float* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __bfloat162float(src[i]);
}

__global__ void from_bf16_bias_kernel(const __nv_bfloat16* __restrict__ src, const float* __restrict__ bias,
                                      float* __restrict__ y, int64_t n, int64_t channels, int64_t inner, bool relu) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = __bfloat162float(src[i]) + bias[(i / inner) % channels];
    y[i] = relu ? (v > 0.0f ? v : 0.0f) : v;
  }
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096)); }
}  // namespace

Tensor bf16_scratch(int64_t n, Device device) { return Tensor::empty(Shape{2 * n}, DType::U8, device); }

void to_bf16(Context& ctx, const float* src, void* dst, int64_t n) {
  if (n == 0) return;
  to_bf16_kernel<<<blocks_for(n), 256, 0, ctx.stream()>>>(src, static_cast<__nv_bfloat16*>(dst), n);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void from_bf16(Context& ctx, const void* src, float* dst, int64_t n) {
  if (n == 0) return;
  from_bf16_kernel<<<blocks_for(n), 256, 0, ctx.stream()>>>(static_cast<const __nv_bfloat16*>(src), dst, n);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void from_bf16_bias(Context& ctx, const void* src, const float* bias, float* y, int64_t n, int64_t channels,
                    int64_t inner, bool relu) {
  if (n == 0) return;
  EMBER_CHECK(channels > 0 && inner > 0, ShapeError, "from_bf16_bias (cuda): channels and inner must be positive");
  from_bf16_bias_kernel<<<blocks_for(n), 256, 0, ctx.stream()>>>(static_cast<const __nv_bfloat16*>(src), bias, y, n,
                                                                 channels, inner, relu);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
