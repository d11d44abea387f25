// Conv2D (+ bias, + optional ReLU) followed by a tiling MaxPool2D, as one pass over each image
// (CPU only; the model engine runs a Conv2D -> MaxPool2D pair through it where
// conv2d_maxpool_fits() says so, layers/model/conv_pool_block.h). For the first layer of an image model
// (one or three input channels) the convolution is a few multiply-adds per output and the cost is
// memory: the unfused pair writes the (N, K, P, Q) convolution output, reads it back to pool it,
// and in backward writes and reads its gradient again. Here the convolution outputs of one pool
// window live in registers only; backward forms the weight gradient from the pooled gradient and
// the window index of each maximum, without the full-size gradient.
//
// Layouts: x (N, C, H, W) RowMajor or NHWC; y (N, K, PP, QQ) NHWC, PP/QQ the pool's output size;
// argmax (N, K, PP, QQ) u8 NHWC, the window index (row * pool width + column) of each maximum;
// w (K, C, R, S) row-major, b (K). Outputs are written (=), never accumulated.
#pragma once

#include "../../core/tensor.h"
#include "../geometry.h"

namespace ember::cpu {

// Whether this pair runs fused: a convolution of few multiply-adds per output (C*R*S <= 32) whose
// input gradient nobody needs, and pool windows that tile its output (stride = window, no
// padding, at most 255 positions).
bool conv2d_maxpool_fits(const Conv2dShape& conv, const Pool2dShape& pool);

// y = maxpool(relu?(conv(x, w) + b)). argmax may be null (inference). A NaN in a window is the
// window's maximum and stays a NaN through the ReLU, so a diverged first layer shows in the loss
// (stricter than the unfused pair: oneDNN's ReLU post-op maps NaN to 0 and the pool's strict
// comparison skips it). scratch: the op's own, reused across calls.
// allow_avx512 = false: the 8-lane (AVX2) kernels even where the CPU has AVX-512 (the same bits in
// a build whose target has FMA, as the default x86-64-v3 does; tests run both).
void conv2d_maxpool_forward(const Conv2dShape& conv, const Pool2dShape& pool, const Tensor& x, const Tensor& w,
                            const Tensor& b, Tensor& y, Tensor* argmax, Tensor& scratch, bool allow_avx512 = true);

// The gradients of w and b from dy (the pooled output's gradient), the forward's x, y and argmax.
// The same bits at any thread count (per-image partial sums, added in the batch's sum order,
// core/pairwise_sum.h: image order within each group of 16 images, the groups as a pairwise tree).
void conv2d_maxpool_backward(const Conv2dShape& conv, const Pool2dShape& pool, const Tensor& x, const Tensor& y,
                             const Tensor& argmax, const Tensor& dy, Tensor& dw, Tensor& db, Tensor& scratch,
                             bool allow_avx512 = true);

}  // namespace ember::cpu
