// The elementwise activations' dispatch (Sigmoid, Tanh, LeakyReLU, GELU): any backend, in the input's
// own layout; the input and output (which the backward reads) kept in `state`. Private.
#pragma once

#include <memory>

#include "../../core/tensor.h"
#include "../activation.h"
#include "../layer.h"

namespace ember::detail {

const Tensor& pointwise_forward(std::unique_ptr<OpState>& state, Pointwise f, float alpha, const Tensor& x);
// After pointwise_forward on the same state: dx in the output's layout (dy in any layout).
const Tensor& pointwise_backward(std::unique_ptr<OpState>& state, Pointwise f, float alpha, const Tensor& dy);

}  // namespace ember::detail
