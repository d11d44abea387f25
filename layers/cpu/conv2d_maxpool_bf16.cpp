// The Conv2D -> MaxPool2D pair in bf16 (see the header). The pool runs per image over vectors of 8
// channels (simd.h), or 16 with AVX-512; the backward writes every position of each window once, the pooled gradient
// at its maximum and 0 elsewhere, so the bf16 output gradient is written in whole vectors.
#include "conv2d_maxpool_bf16.h"

#include <omp.h>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "../../core/cpu/cpu_features.h"
#include "../../core/error.h"
#include "conv2d_bf16.h"
#include "simd.h"

namespace ember::cpu {

namespace {
constexpr int64_t kMaxWindow = 255;  // pool positions, so a window index fits a u8

using simd::f8;
using simd::i8;
typedef uint16_t h8 __attribute__((vector_size(16)));
typedef uint32_t u8v __attribute__((vector_size(32)));
constexpr int64_t kLanes = 8;

void check(const Tensor& t, DType dt, const Shape& s, const char* what, const Conv2dShape& g) {
  EMBER_CHECK(t.shape() == s && t.layout() == Layout::NHWC && t.dtype() == dt && t.device().is_cpu(), ShapeError,
              std::string("conv2d+maxpool2d (cpu, bf16): ") + what + " must be a " + dtype_name(dt) +
                  " NHWC cpu tensor of shape " + s.str() + " for " + g.str() + ", got " + t.str());
}

void check_pair(const Conv2dShape& g, const Pool2dShape& pool) {
  EMBER_CHECK(conv2d_maxpool_bf16_fits(g, pool) && pool.n == g.n && pool.c == g.k && pool.h == g.p && pool.w == g.q,
              ArgumentError,
              "conv2d+maxpool2d (cpu, bf16): this pair does not run fused: " + g.str() + ", " + pool.str());
}

// Eight bf16 values widened to fp32 (exact), and eight fp32 values rounded to bf16 as to_bf16 does.
inline f8 widen(const bf16* p) {
  h8 h;
  __builtin_memcpy(&h, p, sizeof h);
  const u8v u = __builtin_convertvector(h, u8v) << 16;
  f8 f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}
inline void narrow(bf16* p, f8 f) {
  u8v u;
  __builtin_memcpy(&u, &f, sizeof u);
  const u8v rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet_nan = (u >> 16) | 0x40u;
  const u8v out = (u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
  const h8 h = __builtin_convertvector(out, h8);
  __builtin_memcpy(p, &h, sizeof h);
}

// The maximum and its window index over one pool window for channels [c0, c0 + 8) (K a multiple
// of 8). in: the window's top-left output, (row, col) at in + (row * q + col) * k. Strictly greater
// keeps the first maximum; a NaN is taken, then kept.
inline void pool_window(const bf16* in, const Pool2dShape& pool, int64_t q, int64_t k, float* y, uint8_t* argmax) {
  f8 best = f8{} - std::numeric_limits<float>::infinity();
  i8 arg = {};
  int32_t at = 0;
  for (int64_t i = 0; i < pool.r; ++i)
    for (int64_t j = 0; j < pool.s; ++j, ++at) {
      const f8 v = widen(in + (i * q + j) * k);
      const i8 take = (v > best) | ((best == best) & (v != v));
      best = take ? v : best;
      arg = take ? i8{} + at : arg;
    }
  __builtin_memcpy(y, &best, sizeof best);
  if (argmax)
    for (int64_t c = 0; c < kLanes; ++c) argmax[c] = static_cast<uint8_t>(arg[c]);
}
// The same per lane in 16 lanes (AVX-512): the pool over one window for channels [c0, c0 + 16), and
// the backward's scatter of one window's 16 channels. Their bits are the 8-lane code's: the same
// comparisons and selections, the same integer rounding, the sums in the same order.
#if defined(EMBER_AVX512)
typedef float f16v __attribute__((vector_size(64)));
typedef int32_t i16v __attribute__((vector_size(64)));
typedef uint32_t u16v __attribute__((vector_size(64)));
typedef uint16_t h16 __attribute__((vector_size(32)));
typedef uint8_t b16 __attribute__((vector_size(16)));

EMBER_AVX512_INLINE f16v widen16(const bf16* p) {
  h16 h;
  __builtin_memcpy(&h, p, sizeof h);
  const u16v u = __builtin_convertvector(h, u16v) << 16;
  f16v f;
  __builtin_memcpy(&f, &u, sizeof f);
  return f;
}
EMBER_AVX512_INLINE void narrow16(bf16* p, f16v f) {
  u16v u;
  __builtin_memcpy(&u, &f, sizeof u);
  const u16v rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16, quiet_nan = (u >> 16) | 0x40u;
  const u16v out = (u & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
  const h16 h = __builtin_convertvector(out, h16);
  __builtin_memcpy(p, &h, sizeof h);
}

EMBER_AVX512 void pool_window16(const bf16* in, const Pool2dShape& pool, int64_t q, int64_t k, float* y,
                                uint8_t* argmax) {
  f16v best = f16v{} - std::numeric_limits<float>::infinity();
  i16v arg = {};
  int32_t at = 0;
  for (int64_t i = 0; i < pool.r; ++i)
    for (int64_t j = 0; j < pool.s; ++j, ++at) {
      const f16v v = widen16(in + (i * q + j) * k);
      const i16v take = (v > best) | ((best == best) & (v != v));
      best = take ? v : best;
      arg = take ? i16v{} + at : arg;
    }
  __builtin_memcpy(y, &best, sizeof best);
  if (argmax) {
    const b16 a = __builtin_convertvector(arg, b16);
    __builtin_memcpy(argmax, &a, sizeof a);
  }
}

EMBER_AVX512 void scatter_window16(const float* grad, const float* pooled, const uint8_t* at, bool relu,
                                   const Pool2dShape& pool, int64_t q, int64_t k, float* sums, bf16* window) {
  f16v v, m, s;
  __builtin_memcpy(&v, grad, sizeof v);
  __builtin_memcpy(&m, pooled, sizeof m);
  if (relu) v = m > 0.0f ? v : f16v{};  // the ReLU's mask: its output, the maximum, was above 0
  __builtin_memcpy(&s, sums, sizeof s);
  s += v;
  __builtin_memcpy(sums, &s, sizeof s);
  b16 ab;
  __builtin_memcpy(&ab, at, sizeof ab);
  const i16v a = __builtin_convertvector(ab, i16v);
  int32_t pos = 0;
  for (int64_t i = 0; i < pool.r; ++i)
    for (int64_t j = 0; j < pool.s; ++j, ++pos) narrow16(window + (i * q + j) * k, a == pos ? v : f16v{});
}
#endif

// Whether the 16-lane code runs: the CPU has AVX-512 (not capped) and K is a multiple of 16.
bool wide_lanes(int64_t k, bool allow_avx512) {
#if defined(EMBER_AVX512)
  return allow_avx512 && k % 16 == 0 && cpu_avx512();
#else
  (void)k, (void)allow_avx512;
  return false;
#endif
}
}  // namespace

bool conv2d_maxpool_bf16_fits(const Conv2dShape& conv, const Pool2dShape& pool) {
  return conv.k % kLanes == 0 && pool.r == pool.stride_h && pool.s == pool.stride_w && pool.pad_top == 0 &&
         pool.pad_left == 0 && pool.pad_bottom == 0 && pool.pad_right == 0 && pool.r * pool.s <= kMaxWindow;
}

void conv2d_maxpool_bf16_forward(const Conv2dShape& g, const Pool2dShape& pool, const Tensor& x, const Tensor& w,
                                 const Tensor& b, Tensor& y, Tensor* argmax, Bf16Buffers& keep, bool allow_avx512) {
  check_pair(g, pool);
  const Shape ys{g.n, g.k, pool.p, pool.q};
  check(y, DType::F32, ys, "output", g);
  if (argmax) check(*argmax, DType::U8, ys, "argmax", g);
  conv2d_forward_bf16_out(g, x, w, b, keep);
  const bf16* conv = keep.y.data();
  float* out = y.f32();
  uint8_t* arg = argmax ? argmax->data<uint8_t>() : nullptr;
  const int64_t k = g.k;
  [[maybe_unused]] const bool wide = wide_lanes(k, allow_avx512);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t pp = 0; pp < pool.p; ++pp)
      for (int64_t pq = 0; pq < pool.q; ++pq) {
        const bf16* in = conv + ((n * g.p + pp * pool.stride_h) * g.q + pq * pool.stride_w) * k;
        const int64_t o = ((n * pool.p + pp) * pool.q + pq) * k;
#if defined(EMBER_AVX512)
        if (wide) {
          for (int64_t k0 = 0; k0 < k; k0 += 16)
            pool_window16(in + k0, pool, g.q, k, out + o + k0, arg ? arg + o + k0 : nullptr);
          continue;
        }
#endif
        for (int64_t k0 = 0; k0 < k; k0 += kLanes)
          pool_window(in + k0, pool, g.q, k, out + o + k0, arg ? arg + o + k0 : nullptr);
      }
}

void conv2d_maxpool_bf16_backward(const Conv2dShape& g, const Pool2dShape& pool, const Tensor& w, const Tensor& y,
                                  const Tensor& argmax, const Tensor& dy, Tensor* dx, Tensor& dw, Tensor& db,
                                  Bf16Buffers& keep, bool allow_avx512) {
  check_pair(g, pool);
  const Shape ys{g.n, g.k, pool.p, pool.q};
  check(y, DType::F32, ys, "output", g);
  check(argmax, DType::U8, ys, "argmax", g);
  check(dy, DType::F32, ys, "output gradient", g);
  EMBER_CHECK(db.shape() == Shape{g.k} && db.dtype() == DType::F32 && db.device().is_cpu(), ShapeError,
              "conv2d+maxpool2d (cpu, bf16): bias gradient must be an f32 cpu tensor of shape " + Shape{g.k}.str() +
                  ", got " + db.str());
  const int64_t k = g.k, per_image = g.p * g.q * k;
  keep.dy.resize(size_t(g.n * per_image));
  thread_local std::vector<float> partial;  // each image's bias-gradient sums
  partial.assign(size_t(g.n * k), 0.0f);
  float* const sums_all = partial.data();
  bf16* const d16 = keep.dy.data();
  const float* pooled = y.f32();
  const float* grad = dy.f32();
  const uint8_t* at = argmax.data<uint8_t>();
  [[maybe_unused]] const bool wide = wide_lanes(k, allow_avx512);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.n; ++n) {
    bf16* dn = d16 + n * per_image;
    // The outputs no window covers (rows and columns past the last whole window): zero.
    for (int64_t p = 0; p < g.p; ++p)
      for (int64_t q = 0; q < g.q; ++q)
        if (p >= pool.p * pool.stride_h || q >= pool.q * pool.stride_w) std::fill_n(dn + (p * g.q + q) * k, k, bf16{0});
    float* sums = sums_all + n * k;
    for (int64_t pp = 0; pp < pool.p; ++pp)
      for (int64_t pq = 0; pq < pool.q; ++pq) {
        const int64_t o = ((n * pool.p + pp) * pool.q + pq) * k;
        bf16* window = dn + (pp * pool.stride_h * g.q + pq * pool.stride_w) * k;
#if defined(EMBER_AVX512)
        if (wide) {
          for (int64_t c = 0; c < k; c += 16)
            scatter_window16(grad + o + c, pooled + o + c, at + o + c, g.relu, pool, g.q, k, sums + c, window + c);
          continue;
        }
#endif
        for (int64_t c = 0; c < k; c += kLanes) {
          f8 v, m;
          __builtin_memcpy(&v, grad + o + c, sizeof v);
          __builtin_memcpy(&m, pooled + o + c, sizeof m);
          if (g.relu) v = m > 0.0f ? v : f8{};  // the ReLU's mask: its output, the maximum, was above 0
          f8 s;
          __builtin_memcpy(&s, sums + c, sizeof s);
          s += v;
          __builtin_memcpy(sums + c, &s, sizeof s);
          i8 a;
          for (int64_t l = 0; l < kLanes; ++l) a[l] = at[o + c + l];
          // Every position of the window: the gradient at the maximum, 0 elsewhere.
          int32_t pos = 0;
          for (int64_t i = 0; i < pool.r; ++i)
            for (int64_t j = 0; j < pool.s; ++j, ++pos) narrow(window + (i * g.q + j) * k + c, a == pos ? v : f8{});
        }
      }
  }
  float* out = db.f32();
  std::fill_n(out, k, 0.0f);
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t c = 0; c < k; ++c) out[c] += partial[size_t(n * k + c)];
  conv2d_backward_bf16_from(g, w, dx, dw, keep);
}

}  // namespace ember::cpu
