// AveragePooling2D with our own kernels for every geometry and both layouts, not cuDNN: the
// backward gets only dy (cuDNN's pooling backward also asks for x and y), asymmetric SAME
// padding would need a padded copy with a per-window divisor anyway, and two direct kernels
// are simple and deterministic. Forward: one thread per output averages its window's inputs.
// Backward: one thread per input gathers dy / count from the outputs whose windows cover it,
// in the outputs' row-major order (no atomics, so the result does not depend on scheduling).
#include "../../core/cuda/check.h"
#include "avgpool2d.h"
#include "pool_geometry.cuh"

namespace ember::cuda {

namespace {
using pool::Geo;
using pool::kThreads;

// How many input positions the window of output row `o` covers along an axis of `in` positions
// (padding not counted).
template <typename I>
__device__ I covered(I o, I stride, I pad, I window, I in) {
  const I start = o * stride - pad;
  return min(start + window, in) - max(start, I(0));
}

// __restrict__: pooling cannot run in place (a window reads its neighbours' inputs).
template <typename I>
__global__ void avgpool_forward_kernel(const float* __restrict__ x, float* __restrict__ y, Geo<I> g, I total,
                                       bool nhwc) {
  for (I e = blockIdx.x * I(blockDim.x) + threadIdx.x; e < total; e += I(gridDim.x) * blockDim.x) {
    I op, oq, base, row_step, col_step;  // base: x's element (b, ch, 0, 0); steps: one row, one column
    if (nhwc) {
      const I ch = e % g.c;
      I t = e / g.c;
      oq = t % g.q;
      t /= g.q;
      op = t % g.p;
      base = (t / g.p) * g.h * g.w * g.c + ch;
      row_step = g.w * g.c;
      col_step = g.c;
    } else {
      oq = e % g.q;
      I t = e / g.q;
      op = t % g.p;
      base = (t / g.p) * g.h * g.w;  // t / P = b C + ch
      row_step = g.w;
      col_step = 1;
    }
    const I h0 = op * g.stride_h - g.pad_top, w0 = oq * g.stride_w - g.pad_left;
    const I hs = max(h0, I(0)), he = min(h0 + g.r, g.h);
    const I ws = max(w0, I(0)), we = min(w0 + g.s, g.w);
    float sum = 0.0f;
    for (I i = hs; i < he; ++i)
      for (I j = ws; j < we; ++j) sum += x[base + i * row_step + j * col_step];
    // Times the inverse count, as the CPU twin (same rounding); a window always holds an input.
    y[e] = sum * (1.0f / static_cast<float>(max((he - hs) * (we - ws), I(1))));
  }
}

template <typename I>
__global__ void avgpool_backward_kernel(const float* __restrict__ dy, float* __restrict__ dx, Geo<I> g, I total,
                                        bool nhwc) {
  for (I e = blockIdx.x * I(blockDim.x) + threadIdx.x; e < total; e += I(gridDim.x) * blockDim.x) {
    I ih, iw, base, row_step, col_step;  // base: dy's element (b, ch, 0, 0); steps: one row, one column
    if (nhwc) {
      const I ch = e % g.c;
      I t = e / g.c;
      iw = t % g.w;
      t /= g.w;
      ih = t % g.h;
      base = (t / g.h) * g.p * g.q * g.c + ch;
      row_step = g.q * g.c;
      col_step = g.c;
    } else {
      iw = e % g.w;
      I t = e / g.w;
      ih = t % g.h;
      base = (t / g.h) * g.p * g.q;  // t / H = b C + ch
      row_step = g.q;
      col_step = 1;
    }
    I ps, pe, qs, qe;  // the outputs whose windows cover (ih, iw)
    pool::covering(ih, g.pad_top, g.r, g.stride_h, g.p, ps, pe);
    pool::covering(iw, g.pad_left, g.s, g.stride_w, g.q, qs, qe);
    float sum = 0.0f;
    for (I op = ps; op < pe; ++op) {
      const I rows = covered(op, g.stride_h, g.pad_top, g.r, g.h);
      for (I oq = qs; oq < qe; ++oq) {
        const I count = rows * covered(oq, g.stride_w, g.pad_left, g.s, g.w);
        sum += dy[base + op * row_step + oq * col_step] * (1.0f / static_cast<float>(count));
      }
    }
    dx[e] = sum;
  }
}

}  // namespace

void avgpool2d_forward(Context& ctx, const Pool2dShape& g, const Tensor& x, Tensor& y) {
  const Layout layout = x.layout();
  pool::check(ctx, x, {g.n, g.c, g.h, g.w}, "avgpool2d (cuda)", "input", g, layout);
  pool::check(ctx, y, {g.n, g.c, g.p, g.q}, "avgpool2d (cuda)", "output", g, layout);
  const int64_t total = y.numel();
  if (total == 0) return;
  const bool nhwc = layout == Layout::NHWC;
  pool::launch_indexed(std::max(total, x.numel()), [&](auto zero) {
    using I = decltype(zero);
    avgpool_forward_kernel<I><<<pool::blocks_for(total), kThreads, 0, ctx.stream()>>>(
        static_cast<const float*>(x.raw()), static_cast<float*>(y.raw()), pool::geo<I>(g), I(total), nhwc);
  });
}

void avgpool2d_backward(Context& ctx, const Pool2dShape& g, const Tensor& dy, Tensor& dx) {
  const Layout layout = dy.layout();
  pool::check(ctx, dy, {g.n, g.c, g.p, g.q}, "avgpool2d (cuda)", "output gradient", g, layout);
  pool::check(ctx, dx, {g.n, g.c, g.h, g.w}, "avgpool2d (cuda)", "input gradient", g, layout);
  const int64_t total = dx.numel();
  if (total == 0) return;
  const bool nhwc = layout == Layout::NHWC;
  pool::launch_indexed(std::max(total, dy.numel()), [&](auto zero) {
    using I = decltype(zero);
    avgpool_backward_kernel<I><<<pool::blocks_for(total), kThreads, 0, ctx.stream()>>>(
        static_cast<const float*>(dy.raw()), static_cast<float*>(dx.raw()), pool::geo<I>(g), I(total), nhwc);
  });
}

}  // namespace ember::cuda
