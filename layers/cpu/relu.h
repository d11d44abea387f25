// ReLU on the CPU: elementwise, any layout (x and y share it).
#pragma once

#include "../../core/tensor.h"

namespace ember::cpu {

// y = max(x, 0). y may alias x.
void relu_forward(const Tensor& x, Tensor& y);
// dx = dy * (y > 0), from the forward *output*; dx may alias dy.
void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx);

}  // namespace ember::cpu
