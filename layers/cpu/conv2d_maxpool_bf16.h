// Conv2D (+ bias, + optional ReLU) followed by a tiling MaxPool2D under the mixed_bf16 policy (CPU
// only; the model engine runs such a pair through it, layers/model/conv_pool_block.h). The
// convolution runs on conv2d_bf16's oneDNN kernels and writes its output in bf16, which only this
// pair reads: the pool reads half the bytes, and the backward scatters the pooled gradient (with
// the ReLU's mask) straight into the bf16 output gradient the convolution's backward takes, where
// the unfused pair writes an fp32 gradient and rounds it in a second pass.
//
// Numerics: the pool takes the maximum of the bf16-rounded outputs, so the pooled values are bf16
// values (a following bf16 layer rounds its input to the same values, rounding being monotonic);
// of outputs that round alike, the first in the window is the maximum. A NaN that reaches the pool
// (oneDNN's ReLU post-op maps a NaN to 0) is its window's maximum, as in conv2d_maxpool.h.
//
// Layouts as conv2d_maxpool.h: x (N, C, H, W) NHWC; y and argmax (N, K, PP, QQ) NHWC (argmax u8:
// window row * pool width + column); w (K, C, R, S) row-major, b (K). Outputs are written (=).
#pragma once

#include "../../core/tensor.h"
#include "../geometry.h"
#include "bf16.h"

namespace ember::cpu {

// Whether this pair runs fused in bf16: filters in whole vectors of 8, and pool windows that tile
// the convolution's output (stride = window, no padding, at most 255 positions).
bool conv2d_maxpool_bf16_fits(const Conv2dShape& conv, const Pool2dShape& pool);

// y = maxpool(bf16(relu?(conv(x, w) + b))); argmax may be null (inference). `keep` holds x's and the
// output's bf16 copies for the backward. The pool and the backward's scatter run in 16 lanes where
// the CPU has AVX-512 and K is a multiple of 16 (allow_avx512 false: 8 lanes; the same bits).
void conv2d_maxpool_bf16_forward(const Conv2dShape& conv, const Pool2dShape& pool, const Tensor& x, const Tensor& w,
                                 const Tensor& b, Tensor& y, Tensor* argmax, Bf16Buffers& keep,
                                 bool allow_avx512 = true);

// From dy (the pooled output's gradient) and the forward's y and argmax: db (fp32 sums, per image in
// window order, the images in batch order: the same bits at any thread count), dw and, unless null,
// dx (conv2d_backward_bf16_from).
void conv2d_maxpool_bf16_backward(const Conv2dShape& conv, const Pool2dShape& pool, const Tensor& w, const Tensor& y,
                                  const Tensor& argmax, const Tensor& dy, Tensor* dx, Tensor& dw, Tensor& db,
                                  Bf16Buffers& keep, bool allow_avx512 = true);

}  // namespace ember::cpu
