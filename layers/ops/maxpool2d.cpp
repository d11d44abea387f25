// MaxPool2D dispatch.
#include "maxpool2d.h"

#include "../../core/dispatch.h"
#include "../../core/error.h"
#include "../cpu/maxpool2d.h"
#include "../cuda_ops.h"
#include "op_state.h"

namespace ember::detail {

namespace {
struct MaxPool2dState : OpState {
  Tensor x;                // the input in the backend's layout
  Tensor x_copy, dy_copy;  // layout conversions, reused across steps
  Tensor y, indices, dx;   // indices: the CPU's argmax (undefined on a GPU)
  GpuPlanSlot gpu;         // the op table's slot (the GPU max-pool keeps no plan in it)
};
}  // namespace

const Tensor& maxpool2d_forward(std::unique_ptr<OpState>& state, const Pool2dShape& g, const Tensor& x) {
  auto& s = state_as<MaxPool2dState>(state);
  const Shape out{g.n, g.c, g.p, g.q};
  if (on_gpu(x)) {
    // The GPU kernels take either layout: the input's, so nothing is converted.
    s.x = x;
    const Layout layout = x.layout();
    ensure(s.y, out, DType::F32, x.device(), layout);
    layer_cuda_ops().maxpool2d_forward(g, s.x, s.y, nullptr, s.gpu);
    return s.y;
  }
  s.x = as_layout(x, Layout::NHWC, s.x_copy);
  ensure(s.y, out, DType::F32, x.device(), Layout::NHWC);
  ensure(s.indices, out, DType::I32, x.device(), Layout::NHWC);
  cpu::maxpool2d_forward(g, s.x, s.y, &s.indices);
  return s.y;
}

const Tensor& maxpool2d_backward(std::unique_ptr<OpState>& state, const Pool2dShape& g, const Tensor& dy,
                                 bool relu_input) {
  auto& s = state_as<MaxPool2dState>(state);
  EMBER_CHECK(s.y.defined(), Error, "maxpool2d: backward before forward");
  const Layout layout = s.y.layout();
  const Tensor& g_dy = as_layout(dy, layout, s.dy_copy);
  ensure(s.dx, Shape{g.n, g.c, g.h, g.w}, DType::F32, s.y.device(), layout);
  if (on_gpu(s.y))
    layer_cuda_ops().maxpool2d_backward(g, s.x, s.y, g_dy, nullptr, s.dx, relu_input, s.gpu);
  else
    cpu::maxpool2d_backward(g, s.x, s.y, g_dy, &s.indices, s.dx, relu_input);
  return s.dx;
}

const char* maxpool2d_kernel_info(Device device) {
  return device.is_cuda() ? "ember cuda max-pool (the input's layout)" : "ember cpu max-pool (NHWC, argmax)";
}

}  // namespace ember::detail
