// bfloat16 on the GPU for the mixed_bf16 policy (core/runtime.h, Precision): the conversions
// around cuBLAS's and cuDNN's bf16 calls. Rounding is the CPU's to_bf16 (layers/cpu/bf16.h) bit for
// bit: to nearest even, a NaN quieted with its sign kept; bf16 -> fp32 is exact.
#pragma once

#include <cstdint>

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"

namespace ember::cuda {

// Scratch for n bf16 values on `device` (a U8 tensor of 2n bytes from the caching allocator).
Tensor bf16_scratch(int64_t n, Device device);
// dst[i] = bf16(src[i]) for i < n.
void to_bf16(Context& ctx, const float* src, void* dst, int64_t n);
// An f32 tensor's values rounded to bf16, in scratch from the caching allocator.
Tensor rounded_bf16(Context& ctx, const Tensor& t);
// Filters (K, C, R, S) fp32 -> (K, R, S, C) bf16 (rounded as above), and (K, R, S, C) bf16 -> (K, C,
// R, S) fp32: cuDNN's NHWC filters, which its bf16 kernels want beside NHWC activations. rs = R * S.
void kcrs_to_krsc_bf16(Context& ctx, const float* src, void* dst, int64_t k, int64_t c, int64_t rs);
void krsc_bf16_to_kcrs(Context& ctx, const void* src, float* dst, int64_t k, int64_t c, int64_t rs);
// dst[i] = float(src[i]) for i < n.
void from_bf16(Context& ctx, const void* src, float* dst, int64_t n);
// A convolution's output: y[i] = float(src[i]) + bias[channel], then max(., 0) with relu, where the
// channel of element i is (i / inner) % channels (NCHW: inner = P*Q; NHWC: inner = 1).
void from_bf16_bias(Context& ctx, const void* src, const float* bias, float* y, int64_t n, int64_t channels,
                    int64_t inner, bool relu);

}  // namespace ember::cuda
