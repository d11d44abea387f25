// Elementwise activations' dispatch.
#include "pointwise.h"

#include "../../core/dispatch.h"
#include "../../core/error.h"
#include "../cpu/pointwise.h"
#include "../cuda_ops.h"
#include "op_state.h"

namespace ember::detail {

namespace {
struct PointwiseState : OpState {
  Tensor x, y, dy_copy, dx;
};
}  // namespace

const Tensor& pointwise_forward(std::unique_ptr<OpState>& state, Pointwise f, float alpha, const Tensor& x) {
  auto& s = state_as<PointwiseState>(state);
  s.x = x;
  ensure(s.y, x.shape(), DType::F32, x.device(), x.layout());
  if (on_gpu(x))
    layer_cuda_ops().pointwise_forward(f, alpha, x, s.y);
  else
    cpu::pointwise_forward(f, alpha, x, s.y);
  return s.y;
}

const Tensor& pointwise_backward(std::unique_ptr<OpState>& state, Pointwise f, float alpha, const Tensor& dy) {
  auto& s = state_as<PointwiseState>(state);
  EMBER_CHECK(s.y.defined(), Error, "activation: backward before forward");
  const Tensor& g = as_layout(dy, s.y.layout(), s.dy_copy);
  ensure(s.dx, s.y.shape(), DType::F32, s.y.device(), s.y.layout());
  if (on_gpu(s.y))
    layer_cuda_ops().pointwise_backward(f, alpha, s.x, s.y, g, s.dx);
  else
    cpu::pointwise_backward(f, alpha, s.x, s.y, g, s.dx);
  return s.dx;
}

}  // namespace ember::detail
