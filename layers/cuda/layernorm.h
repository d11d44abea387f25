// Layer normalisation on the GPU: the contract of layers/cpu/layernorm.h (row-major (..., C) as
// R rows of C values), on the device's stream.
#pragma once

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"

namespace ember::cuda {

void layernorm_forward(Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& y,
                       Tensor& mean, Tensor& invstd);
void layernorm_backward(Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& invstd, Tensor* dx, Tensor& dgamma, Tensor& dbeta, Tensor& scratch);

}  // namespace ember::cuda
