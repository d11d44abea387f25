// Explicit 2-D padding and cropping on the GPU, for the windows cuDNN cannot express: it pads
// symmetrically, while SAME padding with an even window or a stride pads one more row/column
// at the bottom/right. The GPU Conv2D then pads the input explicitly, runs a VALID cuDNN
// convolution on it, and crops the input gradient back (layers/cuda/conv2d.cpp).
#pragma once

#include <cstdint>

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"

namespace ember::cuda {

// For each of `planes` planes: dst (dh, dw)[i][j] = src (sh, sw)[i - top][j - left], and `fill`
// where that falls outside src. A negative top/left crops.
void shift2d(Context& ctx, const float* src, int64_t planes, int64_t sh, int64_t sw, float* dst, int64_t dh, int64_t dw,
             int64_t top, int64_t left, float fill);

// The windows of g (a Conv2dShape or Pool2dShape) over an input padded to exactly the rows and
// columns they span, with no padding left: a VALID op that cuDNN can run.
template <class G>
G padded_valid(const G& g) {
  G v = g;
  v.h = (g.p - 1) * g.stride_h + g.r;
  v.w = (g.q - 1) * g.stride_w + g.s;
  v.pad_top = v.pad_left = v.pad_bottom = v.pad_right = 0;
  return v;
}

// x (N, C, H, W) placed into padded_valid(g)'s input with `fill` around it (0 for a
// convolution), from the caching allocator.
template <class G>
Tensor pad_input(Context& ctx, const G& g, const Tensor& x, float fill) {
  const G v = padded_valid(g);
  Tensor xp = Tensor::empty(Shape{v.n, v.c, v.h, v.w}, DType::F32, x.device());
  shift2d(ctx, static_cast<const float*>(x.raw()), g.n * g.c, g.h, g.w, static_cast<float*>(xp.raw()), v.h, v.w,
          g.pad_top, g.pad_left, fill);
  return xp;
}

}  // namespace ember::cuda
