// bfloat16 conversion kernels (grid-stride loops) and their launchers.
#include <cuda_bf16.h>

#include <algorithm>

#include "../../core/cuda/check.h"
#include "bf16.h"

namespace ember::cuda {

namespace {
// The CPU's to_bf16 (layers/cpu/bf16.h) bit for bit: to nearest even on the bits, a NaN quieted
// with its sign and upper payload kept (__float2bfloat16_rn would give the canonical NaN).
__device__ __forceinline__ uint16_t round_bf16(float f) {
  const uint32_t u = __float_as_uint(f);
  const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet_nan = (u >> 16) | 0x40u;
  return static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

__global__ void to_bf16_kernel(const float* __restrict__ src, uint16_t* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = round_bf16(src[i]);
}

// (K, C, R, S) fp32 -> (K, R, S, C) bf16, and back: filters for NHWC activations.
__global__ void kcrs_to_krsc_kernel(const float* __restrict__ src, uint16_t* __restrict__ dst, int64_t k, int64_t c,
                                    int64_t rs) {
  const int64_t n = k * c * rs;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ci = i % c, pos = i / c % rs, ki = i / (c * rs);  // i indexes the (K, R, S, C) output
    dst[i] = round_bf16(src[(ki * c + ci) * rs + pos]);
  }
}
__global__ void krsc_to_kcrs_kernel(const __nv_bfloat16* __restrict__ src, float* __restrict__ dst, int64_t k,
                                    int64_t c, int64_t rs) {
  const int64_t n = k * c * rs;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t pos = i % rs, ci = i / rs % c, ki = i / (c * rs);  // i indexes the (K, C, R, S) output
    dst[i] = __bfloat162float(src[(ki * rs + pos) * c + ci]);
  }
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
  to_bf16_kernel<<<blocks_for(n), 256, 0, ctx.stream()>>>(src, static_cast<uint16_t*>(dst), n);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

Tensor rounded_bf16(Context& ctx, const Tensor& t) {
  Tensor r = bf16_scratch(t.numel(), t.device());
  to_bf16(ctx, static_cast<const float*>(t.raw()), r.raw(), t.numel());
  return r;
}

void kcrs_to_krsc_bf16(Context& ctx, const float* src, void* dst, int64_t k, int64_t c, int64_t rs) {
  const int64_t n = k * c * rs;
  if (n == 0) return;
  kcrs_to_krsc_kernel<<<blocks_for(n), 256, 0, ctx.stream()>>>(src, static_cast<uint16_t*>(dst), k, c, rs);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void krsc_bf16_to_kcrs(Context& ctx, const void* src, float* dst, int64_t k, int64_t c, int64_t rs) {
  const int64_t n = k * c * rs;
  if (n == 0) return;
  krsc_to_kcrs_kernel<<<blocks_for(n), 256, 0, ctx.stream()>>>(static_cast<const __nv_bfloat16*>(src), dst, k, c, rs);
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
