// Row softmax on the GPU: the contract of layers/cpu/softmax.h (f32 row-major (N, K); in place
// allowed), on the device's stream.
#pragma once

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"

namespace ember::cuda {

void softmax_forward(Context& ctx, const Tensor& x, Tensor& y);
void softmax_backward(Context& ctx, const Tensor& y, const Tensor& dy, Tensor& dx);

}  // namespace ember::cuda
