// Average pooling dispatch.
#include "avgpool2d.h"

#include "../../core/dispatch.h"
#include "../../core/error.h"
#include "../cpu/avgpool2d.h"
#include "../cuda_ops.h"
#include "op_state.h"

namespace ember::detail {

namespace {
struct AvgPool2dState : OpState {
  Tensor x_copy, dy_copy, y, dx;
};
}  // namespace

const Tensor& avgpool2d_forward(std::unique_ptr<OpState>& state, const Pool2dShape& g, const Tensor& x) {
  auto& s = state_as<AvgPool2dState>(state);
  const Shape out{g.n, g.c, g.p, g.q};
  if (on_gpu(x)) {
    ensure(s.y, out, DType::F32, x.device(), x.layout());
    layer_cuda_ops().avgpool2d_forward(g, x, s.y);
    return s.y;
  }
  const Tensor& xn = as_layout(x, Layout::NHWC, s.x_copy);
  ensure(s.y, out, DType::F32, x.device(), Layout::NHWC);
  cpu::avgpool2d_forward(g, xn, s.y);
  return s.y;
}

const Tensor& avgpool2d_backward(std::unique_ptr<OpState>& state, const Pool2dShape& g, const Tensor& dy) {
  auto& s = state_as<AvgPool2dState>(state);
  EMBER_CHECK(s.y.defined(), Error, "avgpool2d: backward before forward");
  const Tensor& gy = as_layout(dy, s.y.layout(), s.dy_copy);
  ensure(s.dx, Shape{g.n, g.c, g.h, g.w}, DType::F32, s.y.device(), s.y.layout());
  if (on_gpu(gy))
    layer_cuda_ops().avgpool2d_backward(g, gy, s.dx);
  else
    cpu::avgpool2d_backward(g, gy, s.dx);
  return s.dx;
}

const char* avgpool2d_kernel_info(Device device) {
  return device.is_cuda() ? "ember CUDA average pool (own kernels, any padding)" : "ember cpu average pool (NHWC)";
}

}  // namespace ember::detail
