// ReLU dispatch.
#include "relu.h"

#include "../../core/dispatch.h"
#include "../../core/error.h"
#include "../cpu/relu.h"
#include "../cuda_ops.h"
#include "op_state.h"

namespace ember::detail {

namespace {
struct ReluState : OpState {
  Tensor y, dy_copy, dx;
};
}  // namespace

const Tensor& relu_forward(std::unique_ptr<OpState>& state, const Tensor& x) {
  auto& s = state_as<ReluState>(state);
  ensure(s.y, x.shape(), DType::F32, x.device(), x.layout());
  if (on_gpu(x))
    layer_cuda_ops().relu_forward(x, s.y);
  else
    cpu::relu_forward(x, s.y);
  return s.y;
}

const Tensor& relu_backward(std::unique_ptr<OpState>& state, const Tensor& dy) {
  auto& s = state_as<ReluState>(state);
  EMBER_CHECK(s.y.defined(), Error, "relu: backward before forward");
  const Tensor& g = as_layout(dy, s.y.layout(), s.dy_copy);
  ensure(s.dx, s.y.shape(), DType::F32, s.y.device(), s.y.layout());
  if (on_gpu(s.y))
    layer_cuda_ops().relu_backward(s.y, g, s.dx);
  else
    cpu::relu_backward(s.y, g, s.dx);
  return s.dx;
}

}  // namespace ember::detail
