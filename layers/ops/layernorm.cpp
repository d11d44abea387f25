// LayerNormalization dispatch.
#include "layernorm.h"

#include "../../core/dispatch.h"
#include "../../core/error.h"
#include "../cpu/layernorm.h"
#include "../cuda_ops.h"
#include "op_state.h"

namespace ember::detail {

namespace {
struct LayerNormState : OpState {
  Tensor x, x_copy, y, mean, invstd, dy_copy, dx, scratch;
};
}  // namespace

const Tensor& layernorm_forward(std::unique_ptr<OpState>& state, const Tensor& gamma, const Tensor& beta, float eps,
                                const Tensor& x) {
  auto& s = state_as<LayerNormState>(state);
  s.x = as_layout(x, Layout::RowMajor, s.x_copy);
  const int64_t rows = x.numel() / x.dim(x.rank() - 1);
  ensure(s.y, x.shape(), DType::F32, x.device());
  ensure(s.mean, Shape{rows}, DType::F32, x.device());
  ensure(s.invstd, Shape{rows}, DType::F32, x.device());
  if (on_gpu(x))
    layer_cuda_ops().layernorm_forward(s.x, gamma, beta, eps, s.y, s.mean, s.invstd);
  else
    cpu::layernorm_forward(s.x, gamma, beta, eps, s.y, s.mean, s.invstd);
  return s.y;
}

const Tensor* layernorm_backward(std::unique_ptr<OpState>& state, const Tensor& gamma, const Tensor& dy, bool want_dx,
                                 Tensor& dgamma, Tensor& dbeta) {
  auto& s = state_as<LayerNormState>(state);
  EMBER_CHECK(s.x.defined() && s.mean.defined(), Error, "layer normalization: backward before forward");
  const Tensor& g = as_layout(dy, Layout::RowMajor, s.dy_copy);
  Tensor* dx = nullptr;
  if (want_dx) {
    ensure(s.dx, s.x.shape(), DType::F32, s.x.device());
    dx = &s.dx;
  }
  if (on_gpu(g))
    layer_cuda_ops().layernorm_backward(s.x, g, gamma, s.mean, s.invstd, dx, dgamma, dbeta, s.scratch);
  else
    cpu::layernorm_backward(s.x, g, gamma, s.mean, s.invstd, dx, dgamma, dbeta, s.scratch);
  return dx;
}

}  // namespace ember::detail
