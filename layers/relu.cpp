// ReLU layer.
#include "relu.h"

#include "ops/relu.h"

namespace ember {

const Tensor& ReLU::do_forward(const Tensor& x, bool /*training*/) { return detail::relu_forward(state_, x); }

const Tensor& ReLU::do_backward(const Tensor& dy) {
  if (!needs_input_grad()) return no_input_grad();
  if (output_grad_premasked_) return dy;  // the next layer applied the mask already
  return detail::relu_backward(state_, dy);
}

}  // namespace ember
