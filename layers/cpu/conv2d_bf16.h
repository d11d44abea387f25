// Conv2D on the CPU under the mixed_bf16 policy (core/runtime.h, Precision): oneDNN's bf16
// convolution primitives (AMX-BF16 where the CPU has it, else AVX512-BF16) with fp32 accumulation.
// Tensors as in conv2d.h (x, y, dx, dy f32 NHWC; w (K, C, R, S) and b (K) f32); x, w and dy are
// rounded to bf16 on the way in (bf16.h), y, dx, dw and db come out in fp32, written (=); db is summed
// from the fp32 dy.
#pragma once

#include <string>

#include "../../core/tensor.h"
#include "../geometry.h"
#include "bf16.h"

namespace ember::cpu {

// Keeps x's bf16 copy in `keep` for the backward pass.
void conv2d_forward_bf16(const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                         Bf16Buffers& keep);
// After conv2d_forward_bf16 with the same `keep`. As conv2d_backward (conv2d.h) otherwise.
void conv2d_backward_bf16(const Conv2dShape& g, const Tensor& w, const Tensor& y, const Tensor& dy, Tensor* dx,
                          Tensor& dw, Tensor& db, bool dy_premasked, Bf16Buffers& keep);

// For a pair that keeps the convolution's output in bf16 (conv2d_maxpool_bf16.h): the output,
// (N, P, Q, K) bf16 as y's NHWC, into keep.y.
void conv2d_forward_bf16_out(const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& b,
                             Bf16Buffers& keep);
// After conv2d_forward_bf16_out with the same `keep`, from the output gradient the caller wrote
// into keep.dy ((N, P, Q, K) bf16, the fused ReLU's mask applied): dx (unless null) and dw; the bias
// gradient is the caller's (its fp32 sums).
void conv2d_backward_bf16_from(const Conv2dShape& g, const Tensor& w, Tensor* dx, Tensor& dw, Bf16Buffers& keep);

// The oneDNN implementation of each pass for this shape ("fwd brgconv:avx512_core_amx_bf16, ...").
std::string conv2d_bf16_kernel_info(const Conv2dShape& g, bool out16 = false);

}  // namespace ember::cpu
