// Augmentation dispatch (see augment.h).
#include "augment.h"

#include <algorithm>

#include "../../core/dispatch.h"
#include "../../core/error.h"
#include "../cpu/augment.h"
#include "../cuda_ops.h"
#include "op_state.h"

namespace ember::detail {

namespace {
struct AugmentState : OpState {
  Tensor x_copy, y, dy_copy, dx;
  // The counter the forward drew from (2 f32, on its device): the backward's draw. Not the counter
  // minus one: a shared layer's calls advance one counter between a call's forward and backward.
  Tensor drawn;
  bool random = false;  // the last forward drew
};

// A rescale alone maps each value: any tensor, as (1, 1, 1, numel) of its memory. A spatial map
// reads row-major (N, C, H, W).
AugmentSpec flat_spec(const AugmentSpec& s, const Tensor& t) {
  AugmentSpec f = s;
  f.h = f.out_h = 1;
  f.w = f.out_w = t.numel();
  return f;
}

bool spatial(const AugmentSpec& s) { return s.h > 0; }  // Rescaling builds none
}  // namespace

const Tensor& augment_forward(std::unique_ptr<OpState>& state, const AugmentSpec& spec, Tensor* counter,
                              const Tensor& x) {
  auto& s = state_as<AugmentState>(state);
  EMBER_CHECK(x.dtype() == DType::F32, ShapeError, "augmentation: expects f32 input, given " + x.str());
  const bool map = spatial(spec);
  const Tensor& in = map ? as_layout(x, Layout::RowMajor, s.x_copy) : x;
  if (map) {
    EMBER_CHECK(in.rank() == 4 && in.dim(2) == spec.h && in.dim(3) == spec.w, ShapeError,
                "augmentation: expects (N, C, " + std::to_string(spec.h) + ", " + std::to_string(spec.w) +
                    ") input, given " + x.str());
    ensure(s.y, Shape{in.dim(0), in.dim(1), spec.out_h, spec.out_w}, DType::F32, in.device());
  } else {
    ensure(s.y, x.shape(), DType::F32, x.device(), x.layout());
  }
  const AugmentSpec sp = map ? spec : flat_spec(spec, x);
  const int64_t n = map ? in.dim(0) : 1, c = map ? in.dim(1) : 1;
  s.random = counter != nullptr;
  if (s.random) ensure(s.drawn, Shape{2}, DType::F32, counter->device());
  if (on_gpu(x)) {
    const bool fold = s.random && fused_advance();
    layer_cuda_ops().augment_forward(sp, counter, s.random ? &s.drawn : nullptr, in, s.y, n, c, fold);
    if (s.random && !fold) layer_cuda_ops().dropout_advance(*counter);
  } else {
    if (s.random) std::copy_n(counter->f32(), 2, s.drawn.f32());
    cpu::augment(sp, s.random ? cpu::augment_key(sp, s.drawn) : 0, in.f32(), s.y.f32(), n, c, false);
    if (s.random) counter_advance(counter->f32());
  }
  return s.y;
}

const Tensor& augment_backward(std::unique_ptr<OpState>& state, const AugmentSpec& spec, const Tensor& dy) {
  auto& s = state_as<AugmentState>(state);
  EMBER_CHECK(s.y.defined(), Error, "augmentation: backward before forward");
  const bool map = spatial(spec);
  const Tensor& g = as_layout(dy, s.y.layout(), s.dy_copy);
  const AugmentSpec sp = map ? spec : flat_spec(spec, dy);
  const int64_t n = map ? g.dim(0) : 1, c = map ? g.dim(1) : 1;
  if (map)
    ensure(s.dx, Shape{n, c, spec.h, spec.w}, DType::F32, g.device());
  else
    ensure(s.dx, g.shape(), DType::F32, g.device(), g.layout());
  const Tensor* drawn = s.random ? &s.drawn : nullptr;
  if (on_gpu(g))
    layer_cuda_ops().augment_backward(sp, drawn, g, s.dx, n, c);
  else
    cpu::augment(sp, drawn != nullptr ? cpu::augment_key(sp, *drawn) : 0, g.f32(), s.dx.f32(), n, c, true);
  return s.dx;
}

}  // namespace ember::detail
