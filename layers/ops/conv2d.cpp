// Conv2D dispatch: the layout each backend runs in, its kept tensors, and the call.
#include "conv2d.h"

#include <atomic>

#include "../../core/dispatch.h"
#include "../../core/error.h"
#include "../../core/logger.h"
#include "../../core/runtime.h"
#include "../cpu/conv2d.h"
#include "../cpu/conv2d_bf16.h"
#include "../cuda_ops.h"
#include "op_state.h"

namespace ember::detail {

namespace {
struct Conv2dState : OpState {
  Tensor x;                // the input in the backend's layout (a view when it was already)
  Tensor x_copy, dy_copy;  // layout conversions, reused across steps
  Tensor y, dx;
  Tensor dw_unused, db_unused;  // a frozen layer's parameter gradients where the backend has no path without them
  GpuPlanSlot gpu;              // the GPU's plan and workspace, found once
  bool bf16 = false;            // the forward ran in bf16 (the backward follows it)
  cpu::Bf16Buffers bf16_keep;
};

// The CPU kernels (oneDNN) run channels-last; cuDNN NCHW, or NHWC with gpu_nhwc() where the
// padding is symmetric (asymmetric SAME pads explicitly, in NCHW).
Layout backend_layout(const Tensor& t, const Conv2dShape& g) {
  if (!on_gpu(t)) return Layout::NHWC;
  const bool symmetric = g.pad_top == g.pad_bottom && g.pad_left == g.pad_right;
  return gpu_nhwc() && symmetric ? Layout::NHWC : Layout::RowMajor;
}
}  // namespace

namespace {
// At most 27 multiply-adds per output (C x R x S: a first layer on one channel, or three with 3x3
// windows) are bound by memory: bf16 gives them nothing, on either device.
bool worth_bf16(const Conv2dShape& g) { return g.c * g.r * g.s > 27; }
}  // namespace

bool conv2d_runs_bf16_on_gpu(const Conv2dShape& g, int device) {
  return worth_bf16(g) && gpu_precision(device) == Precision::MixedBFloat16;
}

bool conv2d_runs_bf16(const Conv2dShape& g) {
  if (cpu_precision() != Precision::MixedBFloat16 || !worth_bf16(g)) return false;
  if (cpu_bf16().amx) return true;
  static std::atomic<bool> said{false};
  if (!said.exchange(true))
    logger().info(
        "mixed_bf16 on {} without AMX: convolutions run fp32 (oneDNN's bf16 convolutions are slower "
        "there), Dense and attention in bf16",
        cpu_bf16().isa);
  return false;
}

const Tensor& conv2d_forward(std::unique_ptr<OpState>& state, const Conv2dShape& g, const Tensor& x, const Tensor& w,
                             const Tensor& b) {
  auto& s = state_as<Conv2dState>(state);
  const Layout layout = backend_layout(x, g);
  s.x = as_layout(x, layout, s.x_copy);
  ensure(s.y, Shape{g.n, g.k, g.p, g.q}, DType::F32, x.device(), layout);
  s.bf16 = false;
  if (on_gpu(x)) {
    s.bf16 = conv2d_runs_bf16_on_gpu(g, x.device().index);
    layer_cuda_ops().conv2d_forward(g, s.x, w, b, s.y, s.gpu, s.bf16);
  } else if (conv2d_runs_bf16(g)) {
    s.bf16 = true;
    cpu::conv2d_forward_bf16(g, s.x, w, b, s.y, s.bf16_keep);
  } else {
    cpu::conv2d_forward(g, s.x, w, b, s.y);
  }
  return s.y;
}

const Tensor* conv2d_backward(std::unique_ptr<OpState>& state, const Conv2dShape& g, const Tensor& w, const Tensor& dy,
                              bool want_dx, Tensor& dw, Tensor& db, bool dy_premasked) {
  auto& s = state_as<Conv2dState>(state);
  EMBER_CHECK(s.y.defined(), Error, "conv2d: backward before forward");
  const Layout layout = s.x.layout();  // as the forward chose
  const Tensor& g_dy = as_layout(dy, layout, s.dy_copy);
  Tensor* dx = nullptr;
  if (want_dx) {
    ensure(s.dx, s.x.shape(), DType::F32, s.x.device(), layout);
    dx = &s.dx;
  }
  if (!dw.defined() && !dx) return nullptr;        // frozen, and nothing before it trains
  if (!dw.defined() && (on_gpu(s.x) || s.bf16)) {  // these compute them: into scratch
    ensure(s.dw_unused, w.shape(), DType::F32, w.device());
    ensure(s.db_unused, Shape{g.k}, DType::F32, w.device());
  }
  Tensor& dw_to = dw.defined() ? dw : s.dw_unused;
  Tensor& db_to = db.defined() ? db : s.db_unused;
  if (on_gpu(s.x))
    layer_cuda_ops().conv2d_backward(g, s.x, w, s.y, g_dy, dx, dw_to, db_to, dy_premasked, s.gpu, s.bf16);
  else if (s.bf16)
    cpu::conv2d_backward_bf16(g, w, s.y, g_dy, dx, dw_to, db_to, dy_premasked, s.bf16_keep);
  else
    cpu::conv2d_backward(g, s.x, w, s.y, g_dy, dx, dw, db, dy_premasked);
  return dx;
}

std::string conv2d_kernel_info(const Conv2dShape& g, Device device) {
  if (device.is_cuda())
    return layer_cuda_ops().conv2d_kernel_info(device.index, g, conv2d_runs_bf16_on_gpu(g, device.index));
  if (conv2d_runs_bf16(g)) return cpu::conv2d_bf16_kernel_info(g);
  return cpu::conv2d_kernel_info(g);
}

}  // namespace ember::detail
