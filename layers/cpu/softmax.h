// Softmax over the features of row-major (N, K) rows, on the CPU.
#pragma once

#include "../../core/tensor.h"

namespace ember::cpu {

// y = exp(x - max) / sum(exp(x - max)) per row.
void softmax_forward(const Tensor& x, Tensor& y);
// dx = y * (dy - sum(dy * y)) per row.
void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx);

}  // namespace ember::cpu
