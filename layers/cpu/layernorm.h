// Layer normalisation over the last axis on the CPU: x row-major (..., C) read as R rows of C
// values (R = numel / C), gamma and beta (C,), the per-row statistics mean and invstd f32 (R,).
// The formulas are layers/layernorm_math.h's; the parameter gradients sum in the batch's sum
// order (core/pairwise_sum.h: groups of 16 rows, the groups as the pairwise tree), so they do
// not depend on the thread count and a model's micro-batches add up to the whole batch's.
#pragma once

#include "../../core/tensor.h"

namespace ember::cpu {

// y = (x - mean) / sqrt(var + eps) * gamma + beta per row; mean and invstd written for the backward.
void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& y, Tensor& mean,
                       Tensor& invstd);
// After the forward: dgamma = sum over rows of dy * xhat, dbeta = sum of dy (written, =), and dx
// (when given; nullptr skips it). scratch: f32, sized here (the groups' partial sums).
void layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& invstd, Tensor* dx, Tensor& dgamma, Tensor& dbeta, Tensor& scratch);

}  // namespace ember::cpu
