// Dropout dispatch.
#include "dropout.h"

#include "../../core/dispatch.h"
#include "../../core/error.h"
#include "../../core/runtime.h"
#include "../cpu/dropout.h"
#include "../cuda_ops.h"
#include "op_state.h"

namespace ember::detail {

namespace {
struct DropoutState : OpState {
  Tensor y, mask, dy_copy, dx;
};
}  // namespace

const Tensor& dropout_forward(std::unique_ptr<OpState>& state, const DropoutParams& p, Tensor& counter,
                              const Tensor& x) {
  auto& s = state_as<DropoutState>(state);
  ensure(s.y, x.shape(), DType::F32, x.device(), x.layout());
  ensure(s.mask, x.shape(), DType::U8, x.device(), x.layout());
  if (on_gpu(x)) {
    // With fused_advance(), the forward's last block advances the counter: one launch, not two.
    const bool fold = fused_advance();
    layer_cuda_ops().dropout_forward(p, counter, x, s.y, s.mask, fold);
    if (!fold) layer_cuda_ops().dropout_advance(counter);
  } else {
    cpu::dropout_forward(p, counter, x, s.y, s.mask);
    cpu::dropout_advance(counter);
  }
  return s.y;
}

const Tensor& dropout_backward(std::unique_ptr<OpState>& state, float scale, const Tensor& dy) {
  auto& s = state_as<DropoutState>(state);
  EMBER_CHECK(s.mask.defined(), Error, "dropout: backward before a training forward");
  const Tensor& g = as_layout(dy, s.mask.layout(), s.dy_copy);
  ensure(s.dx, s.mask.shape(), DType::F32, s.mask.device(), s.mask.layout());
  if (on_gpu(g))
    layer_cuda_ops().dropout_backward(scale, s.mask, g, s.dx);
  else
    cpu::dropout_backward(scale, s.mask, g, s.dx);
  return s.dx;
}

}  // namespace ember::detail
