// MaxPool2D on cuDNN: CUDNN_POOLING_MAX_DETERMINISTIC, so the backward's result does not depend
// on scheduling. Descriptors per shape, cached.
#include "maxpool2d.h"

#include <cmath>
#include <memory>

#include "../../core/cuda/check.h"
#include "cudnn_desc.h"
#include "pad.h"
#include "plan_cache.h"
#include "relu.h"

namespace ember::cuda {

namespace {
struct Plan {
  TensorDesc x, y;
  PoolDesc pool;
};

int i32(int64_t v) { return static_cast<int>(v); }

// Whether cuDNN's symmetric padding gives exactly these windows; SAME with an even window or a
// stride pads one more at the bottom/right and runs on an explicitly padded input instead.
bool cudnn_fits(const Pool2dShape& g) {
  return g.h + 2 * g.pad_top >= g.r && g.w + 2 * g.pad_left >= g.s &&
         1 + (g.h + 2 * g.pad_top - g.r) / g.stride_h == g.p && 1 + (g.w + 2 * g.pad_left - g.s) / g.stride_w == g.q;
}

std::unique_ptr<Plan> make_plan(const Pool2dShape& g, bool nhwc) {
  auto p = std::make_unique<Plan>();
  p->x = nchw_desc(i32(g.n), i32(g.c), i32(g.h), i32(g.w), nhwc);
  p->y = nchw_desc(i32(g.n), i32(g.c), i32(g.p), i32(g.q), nhwc);
  EMBER_CUDNN_CHECK(cudnnSetPooling2dDescriptor(p->pool, CUDNN_POOLING_MAX_DETERMINISTIC, CUDNN_NOT_PROPAGATE_NAN,
                                                i32(g.r), i32(g.s), i32(g.pad_top), i32(g.pad_left), i32(g.stride_h),
                                                i32(g.stride_w)));
  int n = 0, c = 0, h = 0, w = 0;
  EMBER_CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(p->pool, p->x, &n, &c, &h, &w));
  EMBER_CHECK(h == g.p && w == g.q, Error,
              "maxpool2d (cuda): internal: cuDNN computes a " + std::to_string(h) + "x" + std::to_string(w) +
                  " output for " + g.str());
  return p;
}

// Found through the op's slot (plan_cache.h): no lock or map lookup in the steady state.
Plan& plan_for(const Pool2dShape& g, bool nhwc, ::ember::detail::GpuPlanSlot& slot) {
  static auto* cache = new PlanCache<11, Plan>();
  const PlanCache<11, Plan>::Key key{g.n, g.c, g.h, g.w, g.r, g.s, g.stride_h, g.stride_w, g.pad_top, g.pad_left, nhwc};
  return cache->get(slot, key, [&] { return make_plan(g, nhwc); });
}

// Every tensor in the input's layout: NCHW, or NHWC (gpu_nhwc) where cuDNN's windows fit.
void check(const Context& ctx, const Tensor& t, const Shape& s, const char* what, const Pool2dShape& g, Layout layout) {
  // The message (a shape's str(), ~20 allocations) is built only when the check fails: this runs
  // several times per op per step.
  if (!is_nchw(ctx, t, s, layout)) check_nchw(ctx, t, s, "maxpool2d (cuda) for " + g.str(), what, layout);
  EMBER_CHECK(layout == Layout::RowMajor || cudnn_fits(g), ShapeError,
              "maxpool2d (cuda): asymmetric SAME padding runs NCHW only, got NHWC for " + g.str());
}
}  // namespace

void maxpool2d_forward(Context& ctx, const Pool2dShape& g, const Tensor& x, Tensor& y, Tensor* /*indices*/,
                       ::ember::detail::GpuPlanSlot& slot) {
  const Layout layout = x.layout();
  check(ctx, x, {g.n, g.c, g.h, g.w}, "input", g, layout);
  check(ctx, y, {g.n, g.c, g.p, g.q}, "output", g, layout);
  if (!cudnn_fits(g)) {
    maxpool2d_forward(ctx, padded_valid(g), pad_input(ctx, g, x, -INFINITY), y, nullptr, slot);
    return;
  }
  Plan& p = plan_for(g, layout == Layout::NHWC, slot);
  const float one = 1.0f, zero = 0.0f;
  EMBER_CUDNN_CHECK(cudnnPoolingForward(ctx.dnn(), p.pool, &one, p.x, x.raw(), &zero, p.y, y.raw()));
}

void maxpool2d_backward(Context& ctx, const Pool2dShape& g, const Tensor& x, const Tensor& y, const Tensor& dy,
                        const Tensor* /*indices*/, Tensor& dx, bool relu_input, ::ember::detail::GpuPlanSlot& slot) {
  const Layout layout = x.layout();
  check(ctx, x, {g.n, g.c, g.h, g.w}, "input", g, layout);
  check(ctx, y, {g.n, g.c, g.p, g.q}, "output", g, layout);
  check(ctx, dy, {g.n, g.c, g.p, g.q}, "output gradient", g, layout);
  check(ctx, dx, {g.n, g.c, g.h, g.w}, "input gradient", g, layout);
  if (!cudnn_fits(g)) {  // the padded input again, its gradient, cropped back (then the ReLU mask)
    const Pool2dShape v = padded_valid(g);
    Tensor dxp = Tensor::empty(Shape{v.n, v.c, v.h, v.w}, DType::F32, x.device());
    maxpool2d_backward(ctx, v, pad_input(ctx, g, x, -INFINITY), y, dy, nullptr, dxp, false, slot);
    shift2d(ctx, static_cast<const float*>(dxp.raw()), g.n * g.c, v.h, v.w, static_cast<float*>(dx.raw()), g.h, g.w,
            -g.pad_top, -g.pad_left, 0.0f);
    if (relu_input) relu_backward(ctx, x, dx, dx);
    return;
  }
  Plan& p = plan_for(g, layout == Layout::NHWC, slot);
  const float one = 1.0f, zero = 0.0f;
  EMBER_CUDNN_CHECK(
      cudnnPoolingBackward(ctx.dnn(), p.pool, &one, p.y, y.raw(), p.y, dy.raw(), p.x, x.raw(), &zero, p.x, dx.raw()));
  if (relu_input) relu_backward(ctx, x, dx, dx);  // x is the ReLU's output: zero where it was <= 0
}

}  // namespace ember::cuda
