// MaxPool2D on the CPU, own kernels for NHWC (oneDNN's pooling ran 4-9x slower than these on
// the reference CNN). The forward records, per output element, the input position (h*W + w)
// of its maximum; the backward sends the gradient there.
#pragma once

#include "../../core/tensor.h"
#include "../geometry.h"

namespace ember::cpu {

// x: NHWC (N,C,H,W); y: NHWC (N,C,P,Q); argmax: i32 NHWC (N,C,P,Q). All written (=).
void maxpool2d_forward(const Pool2dShape& g, const Tensor& x, Tensor& y, Tensor& argmax);
// dx (NHWC, N,C,H,W) = dy sent through argmax; positions that were no window's max get 0.
// With `relu_input` (x is a ReLU output), the ReLU's backward is fused in: the gradient at a
// position whose input was <= 0 is 0, so the layer before needs no separate masking pass.
void maxpool2d_backward(const Pool2dShape& g, const Tensor& dy, const Tensor& argmax, Tensor& dx,
                        const Tensor* relu_input = nullptr);

}  // namespace ember::cpu
