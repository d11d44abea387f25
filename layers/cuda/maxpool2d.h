// MaxPool2D on the GPU with cuDNN, NCHW (row-major) activations; asymmetric SAME padding runs
// as a VALID pooling of an input padded with -inf (layers/cuda/pad.h). The
// backward can fuse the ReLU of the layer before (relu_input: mask where the input was <= 0),
// as the CPU path does.
#pragma once

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"
#include "../geometry.h"

namespace ember::cuda {

// The CPU twin's signature (layers/cpu/maxpool2d.h); cuDNN finds the maxima again from x and y,
// so `indices` is not read or written and may be null.
void maxpool2d_forward(Context& ctx, const Pool2dShape& g, const Tensor& x, Tensor& y, Tensor* indices);
void maxpool2d_backward(Context& ctx, const Pool2dShape& g, const Tensor& x, const Tensor& y, const Tensor& dy,
                        const Tensor* indices, Tensor& dx, bool relu_input);

}  // namespace ember::cuda
