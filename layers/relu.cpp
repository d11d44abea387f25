// ReLU layer.
#include "relu.h"

#include "../core/dispatch.h"
#include "../core/error.h"
#include "cpu/relu.h"
#include "cuda_ops.h"

namespace ember {

const Tensor& ReLU::do_forward(const Tensor& x, bool /*training*/) {
  ensure(y_, x.shape(), DType::F32, x.device(), x.layout());
  if (detail::on_gpu(x))
    detail::layer_cuda_ops().relu_forward(x, y_);
  else
    cpu::relu_forward(x, y_);
  return y_;
}

const Tensor& ReLU::do_backward(const Tensor& dy) {
  if (!needs_input_grad_) return no_input_grad();
  if (output_grad_premasked_) return dy;  // the next layer applied the mask already
  const Tensor& g = as_layout(dy, y_.layout(), dy_);
  ensure(dx_, y_.shape(), DType::F32, y_.device(), y_.layout());
  if (detail::on_gpu(y_))
    detail::layer_cuda_ops().relu_backward(y_, g, dx_);
  else
    cpu::relu_backward(y_, g, dx_);
  return dx_;
}

}  // namespace ember
