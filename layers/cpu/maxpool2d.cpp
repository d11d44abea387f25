// Max pooling over NHWC. Channels are innermost, so every inner loop runs over contiguous
// floats. The forward keeps a block of kBlock channels' running max and argmax in local arrays
// (registers): written that way the compare-and-select vectorises; written against the output
// arrays it did not, and ran 9x slower on random data (branch mispredictions).
// Samples are independent: the pool splits over N.
#include "maxpool2d.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "../../core/error.h"

namespace ember::cpu {

namespace {
constexpr int64_t kBlock = 16;  // one AVX-512 register of floats, two AVX2 ones

void check(const Tensor& t, DType dt, const Shape& s, const char* what, const Pool2dShape& g) {
  EMBER_CHECK(t.shape() == s && t.layout() == Layout::NHWC && t.dtype() == dt && t.device().is_cpu(), ShapeError,
              std::string("maxpool2d (cpu): ") + what + " must be a " + dtype_name(dt) + " NHWC cpu tensor of shape " +
                  s.str() + " for " + g.str() + ", got " + t.str());
}

// Max and argmax over the window rows [r0, r1) x cols [s0, s1) for channels [c0, c0 + B).
template <int64_t B>
inline void pool_block(const float* __restrict xs, int64_t w, int64_t C, int64_t c0, int64_t h0, int64_t w0, int64_t r0,
                       int64_t r1, int64_t s0, int64_t s1, float* __restrict yo, int32_t* __restrict io) {
  float m[B];
  int32_t k[B];
  for (int64_t c = 0; c < B; ++c) {
    m[c] = -std::numeric_limits<float>::infinity();
    k[c] = -1;
  }
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t s = s0; s < s1; ++s) {
      const int64_t pos = (h0 + r) * w + (w0 + s);
      const float* __restrict xi = xs + pos * C + c0;
      const int32_t pos32 = static_cast<int32_t>(pos);
      for (int64_t c = 0; c < B; ++c) {
        const bool take = xi[c] > m[c];
        m[c] = take ? xi[c] : m[c];
        k[c] = take ? pos32 : k[c];
      }
    }
  }
  for (int64_t c = 0; c < B; ++c) {
    yo[c0 + c] = m[c];
    io[c0 + c] = k[c];
  }
}
}  // namespace

void maxpool2d_forward(const Pool2dShape& g, const Tensor& x, Tensor& y, Tensor* indices) {
  EMBER_CHECK(indices != nullptr, ArgumentError, "maxpool2d (cpu): the forward records indices: pass them");
  Tensor& argmax = *indices;
  check(x, DType::F32, {g.n, g.c, g.h, g.w}, "input", g);
  check(y, DType::F32, {g.n, g.c, g.p, g.q}, "output", g);
  check(argmax, DType::I32, {g.n, g.c, g.p, g.q}, "argmax", g);
  const float* in = x.f32();
  float* out = y.f32();
  int32_t* idx = argmax.data<int32_t>();
  const int64_t C = g.c;
  const int64_t full = C / kBlock * kBlock;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.n; ++n) {
    const float* xs = in + n * g.h * g.w * C;
    for (int64_t p = 0; p < g.p; ++p) {
      for (int64_t q = 0; q < g.q; ++q) {
        float* yo = out + ((n * g.p + p) * g.q + q) * C;
        int32_t* io = idx + ((n * g.p + p) * g.q + q) * C;
        const int64_t h0 = p * g.stride_h - g.pad_top, w0 = q * g.stride_w - g.pad_left;
        const int64_t r0 = std::max<int64_t>(0, -h0), r1 = std::min(g.r, g.h - h0);  // window rows in bounds
        const int64_t s0 = std::max<int64_t>(0, -w0), s1 = std::min(g.s, g.w - w0);
        for (int64_t c0 = 0; c0 < full; c0 += kBlock)
          pool_block<kBlock>(xs, g.w, C, c0, h0, w0, r0, r1, s0, s1, yo, io);
        for (int64_t c0 = full; c0 < C; ++c0) pool_block<1>(xs, g.w, C, c0, h0, w0, r0, r1, s0, s1, yo, io);
      }
    }
  }
}

void maxpool2d_backward(const Pool2dShape& g, const Tensor& x, const Tensor& /*y*/, const Tensor& dy,
                        const Tensor* indices, Tensor& dx, bool relu) {
  EMBER_CHECK(indices != nullptr, ArgumentError,
              "maxpool2d (cpu): the backward reads the forward's indices: pass them");
  const Tensor& argmax = *indices;
  const Tensor* relu_input = relu ? &x : nullptr;
  check(dy, DType::F32, {g.n, g.c, g.p, g.q}, "output gradient", g);
  check(argmax, DType::I32, {g.n, g.c, g.p, g.q}, "argmax", g);
  check(dx, DType::F32, {g.n, g.c, g.h, g.w}, "input gradient", g);
  if (relu_input) check(*relu_input, DType::F32, {g.n, g.c, g.h, g.w}, "ReLU input", g);
  const float* gy = dy.f32();
  const int32_t* idx = argmax.data<int32_t>();
  const float* xr = relu_input ? relu_input->f32() : nullptr;
  float* gx = dx.f32();
  const int64_t C = g.c;
  // Windows that tile the input (the 2x2/2 case): every input position belongs to at most one
  // window, so one pass writes each dx element exactly once. (SAME on an odd input pads the last
  // window row/column at the bottom/right: not a tiling, its windows reach past the input.)
  const bool tiling = g.tiles();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.n; ++n) {
    float* xs = gx + n * g.h * g.w * C;
    const float* xin = xr ? xr + n * g.h * g.w * C : nullptr;
    const int64_t base = n * g.p * g.q * C;
    if (tiling) {
      // Rows/columns past the last whole window receive no gradient.
      for (int64_t h = g.p * g.r; h < g.h; ++h)
        std::memset(xs + h * g.w * C, 0, static_cast<size_t>(g.w * C) * sizeof(float));
      for (int64_t h = 0; h < g.p * g.r; ++h)
        if (g.q * g.s < g.w)
          std::memset(xs + (h * g.w + g.q * g.s) * C, 0, static_cast<size_t>((g.w - g.q * g.s) * C) * sizeof(float));
      for (int64_t p = 0; p < g.p; ++p)
        for (int64_t q = 0; q < g.q; ++q) {
          const float* go = gy + base + (p * g.q + q) * C;
          const int32_t* io = idx + base + (p * g.q + q) * C;
          for (int64_t r = 0; r < g.r; ++r)
            for (int64_t s = 0; s < g.s; ++s) {
              const int64_t pos = (p * g.r + r) * g.w + (q * g.s + s);
              const int32_t pos32 = static_cast<int32_t>(pos);
              float* d = xs + pos * C;
              if (xin) {
                const float* v = xin + pos * C;
#pragma omp simd
                for (int64_t c = 0; c < C; ++c) d[c] = (io[c] == pos32 && v[c] > 0.0f) ? go[c] : 0.0f;
              } else {
#pragma omp simd
                for (int64_t c = 0; c < C; ++c) d[c] = io[c] == pos32 ? go[c] : 0.0f;
              }
            }
        }
      continue;
    }
    std::memset(xs, 0, static_cast<size_t>(g.h * g.w * C) * sizeof(float));
    for (int64_t o = 0; o < g.p * g.q; ++o) {
      const float* go = gy + base + o * C;
      const int32_t* io = idx + base + o * C;
      for (int64_t c = 0; c < C; ++c) {
        const int32_t k = io[c];
        if (k >= 0 && (!xin || xin[k * C + c] > 0.0f)) xs[k * C + c] += go[c];  // += : windows may share a max
      }
    }
  }
}

}  // namespace ember::cpu
