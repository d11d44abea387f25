// ReLU on the GPU: same contract as layers/cpu/relu.h, on the device's stream.
#pragma once

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"

namespace ember::cuda {

void relu_forward(Context& ctx, const Tensor& x, Tensor& y);
void relu_backward(Context& ctx, const Tensor& y, const Tensor& dy, Tensor& dx);

}  // namespace ember::cuda
