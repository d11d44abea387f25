// Softmax dispatch.
#include "softmax.h"

#include "../../core/dispatch.h"
#include "../../core/error.h"
#include "../cpu/softmax.h"
#include "../cuda_ops.h"
#include "op_state.h"

namespace ember::detail {

namespace {
struct SoftmaxState : OpState {
  Tensor y, dx;
};
}  // namespace

const Tensor& softmax_forward(std::unique_ptr<OpState>& state, const Tensor& x) {
  auto& s = state_as<SoftmaxState>(state);
  ensure(s.y, x.shape(), DType::F32, x.device());
  if (on_gpu(x))
    layer_cuda_ops().softmax_forward(x, s.y);
  else
    cpu::softmax_forward(x, s.y);
  return s.y;
}

const Tensor& softmax_backward(std::unique_ptr<OpState>& state, const Tensor& dy) {
  auto& s = state_as<SoftmaxState>(state);
  EMBER_CHECK(s.y.defined(), Error, "softmax: backward before forward");
  ensure(s.dx, s.y.shape(), DType::F32, s.y.device());
  if (on_gpu(s.y))
    layer_cuda_ops().softmax_backward(s.y, dy, s.dx);
  else
    cpu::softmax_backward(s.y, dy, s.dx);
  return s.dx;
}

}  // namespace ember::detail
