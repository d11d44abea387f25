// Average pooling over NHWC: channels innermost, so each window position adds a contiguous run
// of C floats. Samples are independent: the pool splits over N (the backward's scatter stays
// within one sample, in a fixed order: deterministic).
#include "avgpool2d.h"

#include <algorithm>

#include "../../core/error.h"

namespace ember::cpu {

namespace {
void check(const Tensor& t, const Shape& s, const char* what, const Pool2dShape& g) {
  EMBER_CHECK(t.shape() == s && t.layout() == Layout::NHWC && t.dtype() == DType::F32 && t.device().is_cpu(),
              ShapeError,
              std::string("avgpool2d (cpu): ") + what + " must be an f32 NHWC cpu tensor of shape " + s.str() +
                  " for " + g.str() + ", got " + t.str());
}

// The window of output (p, q) clipped to the input: rows [h0, h1), cols [w0, w1).
struct Window {
  int64_t h0, h1, w0, w1;
  float inv_count;
};
Window window(const Pool2dShape& g, int64_t p, int64_t q) {
  Window w{};
  w.h0 = std::max<int64_t>(p * g.stride_h - g.pad_top, 0);
  w.h1 = std::min<int64_t>(p * g.stride_h - g.pad_top + g.r, g.h);
  w.w0 = std::max<int64_t>(q * g.stride_w - g.pad_left, 0);
  w.w1 = std::min<int64_t>(q * g.stride_w - g.pad_left + g.s, g.w);
  const int64_t count = std::max<int64_t>((w.h1 - w.h0) * (w.w1 - w.w0), 1);  // padding is not counted
  w.inv_count = 1.0f / static_cast<float>(count);
  return w;
}
}  // namespace

void avgpool2d_forward(const Pool2dShape& g, const Tensor& x, Tensor& y) {
  check(x, {g.n, g.c, g.h, g.w}, "input", g);
  check(y, {g.n, g.c, g.p, g.q}, "output", g);
  const float* in = x.f32();
  float* out = y.f32();
  const int64_t C = g.c;
#pragma omp parallel for schedule(static) if (g.n * g.c * g.p * g.q > 16384)
  for (int64_t n = 0; n < g.n; ++n) {
    const float* xs = in + n * g.h * g.w * C;
    for (int64_t p = 0; p < g.p; ++p)
      for (int64_t q = 0; q < g.q; ++q) {
        const Window win = window(g, p, q);
        float* yo = out + ((n * g.p + p) * g.q + q) * C;
        std::fill(yo, yo + C, 0.0f);
        for (int64_t h = win.h0; h < win.h1; ++h)
          for (int64_t w = win.w0; w < win.w1; ++w) {
            const float* xi = xs + (h * g.w + w) * C;
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) yo[c] += xi[c];
          }
#pragma omp simd
        for (int64_t c = 0; c < C; ++c) yo[c] *= win.inv_count;
      }
  }
}

void avgpool2d_backward(const Pool2dShape& g, const Tensor& dy, Tensor& dx) {
  check(dy, {g.n, g.c, g.p, g.q}, "output gradient", g);
  check(dx, {g.n, g.c, g.h, g.w}, "input gradient", g);
  const float* gy = dy.f32();
  float* gx = dx.f32();
  const int64_t C = g.c;
#pragma omp parallel for schedule(static) if (g.n * g.c * g.h * g.w > 16384)
  for (int64_t n = 0; n < g.n; ++n) {
    float* xs = gx + n * g.h * g.w * C;
    std::fill(xs, xs + g.h * g.w * C, 0.0f);
    for (int64_t p = 0; p < g.p; ++p)
      for (int64_t q = 0; q < g.q; ++q) {
        const Window win = window(g, p, q);
        const float* go = gy + ((n * g.p + p) * g.q + q) * C;
        for (int64_t h = win.h0; h < win.h1; ++h)
          for (int64_t w = win.w0; w < win.w1; ++w) {
            float* xi = xs + (h * g.w + w) * C;
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) xi[c] += go[c] * win.inv_count;
          }
      }
  }
}

}  // namespace ember::cpu
