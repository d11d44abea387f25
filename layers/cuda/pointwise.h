// Sigmoid, tanh, LeakyReLU and GELU on the GPU: the contract of layers/cpu/pointwise.h (elementwise,
// any layout shared by all the tensors, in place allowed), on the device's stream.
#pragma once

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"
#include "../activation.h"

namespace ember::cuda {

void pointwise_forward(Context& ctx, ::ember::detail::Pointwise f, float alpha, const Tensor& x, Tensor& y);
void pointwise_backward(Context& ctx, ::ember::detail::Pointwise f, float alpha, const Tensor& x, const Tensor& y,
                        const Tensor& dy, Tensor& dx);

}  // namespace ember::cuda
