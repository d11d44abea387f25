// Max pooling over NHWC: the channel dimension is innermost, so every inner loop runs over C
// contiguous floats and vectorises. Samples are independent: the pool splits over N.
#include "layers/cpu/maxpool2d.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace ember::cpu {

namespace {
void check(const Tensor& t, DType dt, const Shape& s, const char* what, const Pool2dShape& g) {
  EMBER_CHECK(t.shape() == s && t.layout() == Layout::NHWC && t.dtype() == dt && t.device().is_cpu(), ShapeError,
              std::string("maxpool2d (cpu): ") + what + " must be a " + dtype_name(dt) + " NHWC cpu tensor of shape " +
                  s.str() + " for " + g.str() + ", got " + t.str());
}
}  // namespace

void maxpool2d_forward(const Pool2dShape& g, const Tensor& x, Tensor& y, Tensor& argmax) {
  check(x, DType::F32, {g.n, g.c, g.h, g.w}, "input", g);
  check(y, DType::F32, {g.n, g.c, g.p, g.q}, "output", g);
  check(argmax, DType::I32, {g.n, g.c, g.p, g.q}, "argmax", g);
  const float* in = x.f32();
  float* out = y.f32();
  int32_t* idx = argmax.data<int32_t>();
  const int64_t C = g.c;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.n; ++n) {
    const float* xs = in + n * g.h * g.w * C;
    for (int64_t p = 0; p < g.p; ++p) {
      for (int64_t q = 0; q < g.q; ++q) {
        float* yo = out + ((n * g.p + p) * g.q + q) * C;
        int32_t* io = idx + ((n * g.p + p) * g.q + q) * C;
        for (int64_t c = 0; c < C; ++c) {
          yo[c] = -std::numeric_limits<float>::infinity();
          io[c] = -1;
        }
        const int64_t h0 = p * g.stride_h - g.pad_top, w0 = q * g.stride_w - g.pad_left;
        for (int64_t r = std::max<int64_t>(0, -h0); r < g.r && h0 + r < g.h; ++r) {
          for (int64_t s = std::max<int64_t>(0, -w0); s < g.s && w0 + s < g.w; ++s) {
            const int64_t pos = (h0 + r) * g.w + (w0 + s);
            const float* xi = xs + pos * C;
            const int32_t pos32 = static_cast<int32_t>(pos);
#pragma omp simd
            for (int64_t c = 0; c < C; ++c) {
              const bool take = xi[c] > yo[c];
              yo[c] = take ? xi[c] : yo[c];
              io[c] = take ? pos32 : io[c];
            }
          }
        }
      }
    }
  }
}

void maxpool2d_backward(const Pool2dShape& g, const Tensor& dy, const Tensor& argmax, Tensor& dx) {
  check(dy, DType::F32, {g.n, g.c, g.p, g.q}, "output gradient", g);
  check(argmax, DType::I32, {g.n, g.c, g.p, g.q}, "argmax", g);
  check(dx, DType::F32, {g.n, g.c, g.h, g.w}, "input gradient", g);
  const float* gy = dy.f32();
  const int32_t* idx = argmax.data<int32_t>();
  float* gx = dx.f32();
  const int64_t C = g.c;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.n; ++n) {
    float* xs = gx + n * g.h * g.w * C;
    std::memset(xs, 0, static_cast<size_t>(g.h * g.w * C) * sizeof(float));
    const int64_t base = n * g.p * g.q * C;
    for (int64_t o = 0; o < g.p * g.q; ++o) {
      const float* go = gy + base + o * C;
      const int32_t* io = idx + base + o * C;
      for (int64_t c = 0; c < C; ++c)
        if (io[c] >= 0) xs[io[c] * C + c] += go[c];  // += : overlapping windows may share a max
    }
  }
}

}  // namespace ember::cpu
