// Sigmoid, tanh, LeakyReLU and GELU on the CPU: elementwise, any layout (x, y, dy, dx share it).
#pragma once

#include "../../core/tensor.h"
#include "../activation.h"

namespace ember::cpu {

// y = f(x); `alpha`: LeakyReLU's slope below zero (ignored by the others).
void pointwise_forward(detail::Pointwise f, float alpha, const Tensor& x, Tensor& y);
// dx = dy * f'(x): sigmoid y(1 - y), tanh 1 - y^2 (from the output y), LeakyReLU 1 or alpha
// (from the input x's sign), GELU from x (layers/pointwise_math.h).
void pointwise_backward(detail::Pointwise f, float alpha, const Tensor& x, const Tensor& y, const Tensor& dy,
                        Tensor& dx);

}  // namespace ember::cpu
