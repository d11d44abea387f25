// MaxPool2D on the CPU, own kernels for NHWC (oneDNN's pooling ran 4-9x slower than these on
// the reference CNN). The forward records, per output element, the input position (h*W + w)
// of its maximum; the backward sends the gradient there.
#pragma once

#include "../../core/tensor.h"
#include "../geometry.h"

namespace ember::cpu {

// The twins' one signature (layers/cuda/maxpool2d.h has the same): x NHWC (N,C,H,W), y NHWC
// (N,C,P,Q), written (=); `indices` i32 NHWC (N,C,P,Q), where each maximum came from. The CPU
// records them and its backward reads them, so here they are required (cuDNN finds the maxima
// again from x and y and takes null).
void maxpool2d_forward(const Pool2dShape& g, const Tensor& x, Tensor& y, Tensor* indices);
// dx (NHWC, N,C,H,W) = dy sent through the indices; positions that were no window's max get 0.
// With `relu_input` (x is a ReLU output), the ReLU's backward is fused in: the gradient at a
// position whose input was <= 0 is 0, so the layer before needs no separate masking pass. x is
// read only then; y is not read here.
void maxpool2d_backward(const Pool2dShape& g, const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor* indices,
                        Tensor& dx, bool relu_input);

}  // namespace ember::cpu
