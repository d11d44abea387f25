// AveragePooling2D with our own kernels for every geometry and both layouts, not cuDNN: the
// backward gets only dy (cuDNN's pooling backward also asks for x and y), asymmetric SAME
// padding would need a padded copy with a per-window divisor anyway, and two direct kernels
// are simple and deterministic. Forward: one thread per output averages its window's inputs.
// Backward: one thread per input gathers dy / count from the outputs whose windows cover it,
// in the outputs' row-major order (no atomics, so the result does not depend on scheduling).
#include <limits>

#include "../../core/cuda/check.h"
#include "avgpool2d.h"

namespace ember::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

// The geometry in the kernels' index type: int32_t when every index fits (32-bit division is
// far cheaper than 64-bit), else int64_t. Signed: window starts may lie in the padding (< 0).
template <typename I>
struct Geo {
  I c, h, w, p, q, r, s, stride_h, stride_w, pad_top, pad_left;
};

template <typename I>
Geo<I> geo(const Pool2dShape& g) {
  return {I(g.c), I(g.h),        I(g.w),        I(g.p),       I(g.q),       I(g.r),
          I(g.s), I(g.stride_h), I(g.stride_w), I(g.pad_top), I(g.pad_left)};
}

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
    // Output row op covers ih when op*stride - pad <= ih < op*stride - pad + r.
    const I a = ih + g.pad_top, bw = iw + g.pad_left;
    const I ps = a < g.r ? 0 : (a - g.r) / g.stride_h + 1, pe = min(a / g.stride_h + 1, g.p);
    const I qs = bw < g.s ? 0 : (bw - g.s) / g.stride_w + 1, qe = min(bw / g.stride_w + 1, g.q);
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

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

// Whether every index, and the grid-stride loop's last step past the end, fits in int32_t.
bool fits_i32(int64_t total) { return total + kMaxBlocks * kThreads <= std::numeric_limits<int32_t>::max(); }

void check(const Context& ctx, const Tensor& t, const Shape& s, const char* what, const Pool2dShape& g, Layout layout) {
  // The message is built only when the check fails.
  if (!is_nchw(ctx, t, s, layout)) check_nchw(ctx, t, s, "avgpool2d (cuda) for " + g.str(), what, layout);
}

template <typename I>
void launch_forward(Context& ctx, const Pool2dShape& g, const Tensor& x, Tensor& y, int64_t total, bool nhwc) {
  avgpool_forward_kernel<I><<<blocks_for(total), kThreads, 0, ctx.stream()>>>(
      static_cast<const float*>(x.raw()), static_cast<float*>(y.raw()), geo<I>(g), I(total), nhwc);
}

template <typename I>
void launch_backward(Context& ctx, const Pool2dShape& g, const Tensor& dy, Tensor& dx, int64_t total, bool nhwc) {
  avgpool_backward_kernel<I><<<blocks_for(total), kThreads, 0, ctx.stream()>>>(
      static_cast<const float*>(dy.raw()), static_cast<float*>(dx.raw()), geo<I>(g), I(total), nhwc);
}
}  // namespace

void avgpool2d_forward(Context& ctx, const Pool2dShape& g, const Tensor& x, Tensor& y) {
  const Layout layout = x.layout();
  check(ctx, x, {g.n, g.c, g.h, g.w}, "input", g, layout);
  check(ctx, y, {g.n, g.c, g.p, g.q}, "output", g, layout);
  const int64_t total = y.numel();
  if (total == 0) return;
  const bool nhwc = layout == Layout::NHWC;
  if (fits_i32(std::max(total, x.numel())))
    launch_forward<int32_t>(ctx, g, x, y, total, nhwc);
  else
    launch_forward<int64_t>(ctx, g, x, y, total, nhwc);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void avgpool2d_backward(Context& ctx, const Pool2dShape& g, const Tensor& dy, Tensor& dx) {
  const Layout layout = dy.layout();
  check(ctx, dy, {g.n, g.c, g.p, g.q}, "output gradient", g, layout);
  check(ctx, dx, {g.n, g.c, g.h, g.w}, "input gradient", g, layout);
  const int64_t total = dx.numel();
  if (total == 0) return;
  const bool nhwc = layout == Layout::NHWC;
  if (fits_i32(std::max(total, dy.numel())))
    launch_backward<int32_t>(ctx, g, dy, dx, total, nhwc);
  else
    launch_backward<int64_t>(ctx, g, dy, dx, total, nhwc);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
