// MaxPool2D with our own kernels for every geometry and both layouts, not cuDNN: any padding
// (asymmetric SAME included) without a padded copy, NHWC as NCHW, the ReLU's backward fused into
// the pool's, and the CPU twin's choice among equal maxima, so both devices give the same bits.
// Forward: one thread per output finds its window's max. Backward: one thread per input finds
// the maxima of the windows that cover it again (from x, as cuDNN does: nothing is kept between
// the passes) and sums the gradients of those whose max it is, in the outputs' row-major order,
// as the CPU twin adds them (no atomics: the result does not depend on scheduling).
#include <cmath>

#include "../../core/cuda/check.h"
#include "maxpool2d.h"
#include "pool_geometry.cuh"

namespace ember::cuda {

namespace {
using pool::Geo;
using pool::kThreads;
using pool::Planes;

// Output (op, oq)'s window max over x's plane `pl` into m, and where it is (i * W + j, the CPU
// twin's argmax): rows, then columns, the first of equal maxima (>, as the CPU); -inf and -1
// when no input beats -inf (all NaN or -inf: no input then gets the gradient).
template <typename I>
__device__ __forceinline__ I window_max(const float* __restrict__ x, const Geo<I>& g, const Planes<I>& pl, I op, I oq,
                                        float& m) {
  const I h0 = op * g.stride_h - g.pad_top, w0 = oq * g.stride_w - g.pad_left;
  const I hs = max(h0, I(0)), he = min(h0 + g.r, g.h), ws = max(w0, I(0)), we = min(w0 + g.s, g.w);
  m = -INFINITY;
  I at = -1;
  for (I i = hs; i < he; ++i)
    for (I j = ws; j < we; ++j) {
      const float v = x[pl.in + i * pl.in_row + j * pl.in_col];
      if (v > m) {
        m = v;
        at = i * g.w + j;
      }
    }
  return at;
}

// __restrict__: pooling cannot run in place (a window reads its neighbours' inputs).
template <typename I>
__global__ void maxpool_forward_kernel(const float* __restrict__ x, float* __restrict__ y, Geo<I> g, I total,
                                       bool nhwc) {
  for (I e = blockIdx.x * I(blockDim.x) + threadIdx.x; e < total; e += I(gridDim.x) * blockDim.x) {
    I b, ch, op, oq;
    pool::decode(e, g.c, g.p, g.q, nhwc, b, ch, op, oq);
    float m;
    window_max(x, g, pool::planes(g, b, ch, nhwc), op, oq, m);
    y[e] = m;
  }
}

// relu: x is a ReLU's output, and the gradient stops where it is not > 0 (the CPU twin's mask).
// tiling: windows that tile the input (at most one covers each input): dx takes dy itself, as the
// CPU twin's pass for them does, else the sum from 0 (the same but for the sign of a zero).
template <typename I>
__global__ void maxpool_backward_kernel(const float* __restrict__ x, const float* __restrict__ dy,
                                        float* __restrict__ dx, Geo<I> g, I total, bool nhwc, bool relu, bool tiling) {
  for (I e = blockIdx.x * I(blockDim.x) + threadIdx.x; e < total; e += I(gridDim.x) * blockDim.x) {
    if (relu && !(x[e] > 0.0f)) {
      dx[e] = 0.0f;
      continue;
    }
    I b, ch, ih, iw;
    pool::decode(e, g.c, g.h, g.w, nhwc, b, ch, ih, iw);
    const Planes<I> pl = pool::planes(g, b, ch, nhwc);
    I ps, pe, qs, qe;  // the outputs whose windows cover (ih, iw)
    pool::covering(ih, g.pad_top, g.r, g.stride_h, g.p, ps, pe);
    pool::covering(iw, g.pad_left, g.s, g.stride_w, g.q, qs, qe);
    const I here = ih * g.w + iw;
    float sum = 0.0f;
    for (I op = ps; op < pe; ++op)
      for (I oq = qs; oq < qe; ++oq) {
        float m;
        if (window_max(x, g, pl, op, oq, m) != here) continue;
        const float d = dy[pl.out + op * pl.out_row + oq * pl.out_col];
        sum = tiling ? d : sum + d;
      }
    dx[e] = sum;
  }
}

}  // namespace

void maxpool2d_forward(Context& ctx, const Pool2dShape& g, const Tensor& x, Tensor& y, Tensor* /*indices*/,
                       ::ember::detail::GpuPlanSlot& /*slot*/) {
  const Layout layout = x.layout();
  pool::check(ctx, x, {g.n, g.c, g.h, g.w}, "maxpool2d (cuda)", "input", g, layout);
  pool::check(ctx, y, {g.n, g.c, g.p, g.q}, "maxpool2d (cuda)", "output", g, layout);
  const int64_t total = y.numel();
  if (total == 0) return;
  const bool nhwc = layout == Layout::NHWC;
  pool::launch_indexed(std::max(total, x.numel()), [&](auto zero) {
    using I = decltype(zero);
    maxpool_forward_kernel<I><<<pool::blocks_for(total), kThreads, 0, ctx.stream()>>>(
        static_cast<const float*>(x.raw()), static_cast<float*>(y.raw()), pool::geo<I>(g), I(total), nhwc);
  });
}

void maxpool2d_backward(Context& ctx, const Pool2dShape& g, const Tensor& x, const Tensor& y, const Tensor& dy,
                        const Tensor* /*indices*/, Tensor& dx, bool relu_input,
                        ::ember::detail::GpuPlanSlot& /*slot*/) {
  const Layout layout = x.layout();
  pool::check(ctx, x, {g.n, g.c, g.h, g.w}, "maxpool2d (cuda)", "input", g, layout);
  pool::check(ctx, y, {g.n, g.c, g.p, g.q}, "maxpool2d (cuda)", "output", g, layout);
  pool::check(ctx, dy, {g.n, g.c, g.p, g.q}, "maxpool2d (cuda)", "output gradient", g, layout);
  pool::check(ctx, dx, {g.n, g.c, g.h, g.w}, "maxpool2d (cuda)", "input gradient", g, layout);
  const int64_t total = dx.numel();
  if (total == 0) return;
  const bool nhwc = layout == Layout::NHWC;
  const bool tiling = g.tiles();  // as the CPU twin decides
  pool::launch_indexed(std::max(total, dy.numel()), [&](auto zero) {
    using I = decltype(zero);
    maxpool_backward_kernel<I><<<pool::blocks_for(total), kThreads, 0, ctx.stream()>>>(
        static_cast<const float*>(x.raw()), static_cast<const float*>(dy.raw()), static_cast<float*>(dx.raw()),
        pool::geo<I>(g), I(total), nhwc, relu_input, tiling);
  });
}

}  // namespace ember::cuda
