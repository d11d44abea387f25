// Softmax's dispatch over row-major (N, K): the output (which the backward reads) kept in
// `state`. Private to the library.
#pragma once

#include <memory>

#include "../../core/tensor.h"
#include "../layer.h"

namespace ember::detail {

const Tensor& softmax_forward(std::unique_ptr<OpState>& state, const Tensor& x);
const Tensor& softmax_backward(std::unique_ptr<OpState>& state, const Tensor& dy);

}  // namespace ember::detail
