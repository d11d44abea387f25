// AveragePooling2D on the GPU: the contract of layers/cpu/avgpool2d.h (Keras' average: padding
// not counted; any padding, asymmetric SAME included), on the device's stream. x, y, dy, dx are
// all NCHW (row-major) or all NHWC.
#pragma once

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"
#include "../geometry.h"

namespace ember::cuda {

// x (N, C, H, W) -> y (N, C, P, Q), written (=).
void avgpool2d_forward(Context& ctx, const Pool2dShape& g, const Tensor& x, Tensor& y);
// dx (N, C, H, W), written (=): each output's gradient spread evenly over its window's inputs.
void avgpool2d_backward(Context& ctx, const Pool2dShape& g, const Tensor& dy, Tensor& dx);

}  // namespace ember::cuda
