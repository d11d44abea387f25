// The fused Conv2D -> MaxPool2D pair (see the header). One image per OpenMP iteration: the image
// is copied into a zero-bordered (C, H', W') scratch when it is padded or channels-last with
// C > 1 (so the inner loops have no bounds checks), then, per pooled output and block of kBlock
// filters, the window's convolution outputs are computed one after another in local arrays (which
// the compiler keeps in vector registers: the same trick as maxpool2d.cpp) and only the maximum
// and its window index leave them.
#include "conv2d_maxpool.h"

#include <omp.h>

#include <algorithm>
#include <limits>

#include "../../core/cpu/cpu_features.h"
#include "../../core/error.h"
#include "../../core/pairwise_sum.h"
#include "simd.h"

namespace ember::cpu {

namespace {
constexpr int64_t kMaxTaps = 32;     // C*R*S: the convolutions cheap enough that memory is the cost
constexpr int64_t kMaxWindow = 255;  // pool positions, so a window index fits a u8

struct Geo {
  int64_t c, h, w, k, taps;  // input, filters, C*R*S
  int64_t hp, wp;            // the padded input's size
  int64_t sh, sw;            // convolution strides
  int64_t pr, ps, pp, pq;    // pool window and output
  int64_t off[kMaxTaps];     // each tap's offset in the padded image: (c * hp + r) * wp + s
};

Geo geo(const Conv2dShape& g, const Pool2dShape& pool) {
  Geo e{};
  e.c = g.c, e.h = g.h, e.w = g.w, e.k = g.k, e.taps = g.c * g.r * g.s;
  e.hp = g.h + g.pad_top + g.pad_bottom, e.wp = g.w + g.pad_left + g.pad_right;
  e.sh = g.stride_h, e.sw = g.stride_w;
  e.pr = pool.r, e.ps = pool.s, e.pp = pool.p, e.pq = pool.q;
  int64_t t = 0;
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t r = 0; r < g.r; ++r)
      for (int64_t s = 0; s < g.s; ++s) e.off[t++] = (c * e.hp + r) * e.wp + s;
  return e;
}

// Whether image n of x can be read in place as (C, H', W'): no padding, and CHW in memory.
bool in_place(const Conv2dShape& g, const Tensor& x) {
  return g.pad_top == 0 && g.pad_left == 0 && g.pad_bottom == 0 && g.pad_right == 0 &&
         (x.layout() == Layout::RowMajor || g.c == 1);
}

// Image n as (C, H', W'): in x itself, or copied with zero borders into xp.
const float* image(const Conv2dShape& g, const Geo& e, const Tensor& x, int64_t n, float* xp) {
  const float* in = x.f32() + n * g.c * g.h * g.w;
  if (in_place(g, x)) return in;
  std::fill(xp, xp + e.c * e.hp * e.wp, 0.0f);
  const bool nhwc = x.layout() == Layout::NHWC;
  for (int64_t c = 0; c < g.c; ++c)
    for (int64_t h = 0; h < g.h; ++h)
      for (int64_t w = 0; w < g.w; ++w)
        xp[(c * e.hp + h + g.pad_top) * e.wp + w + g.pad_left] =
            nhwc ? in[(h * g.w + w) * g.c + c] : in[(c * g.h + h) * g.w + w];
  return xp;
}

// Eight floats, ints and bytes (simd.h): one AVX2 register.
using simd::b8;
using simd::f8;
using simd::i8;
constexpr int64_t kLanes = 8;

// Lanes [0, n) of p into v, the rest 0 (n < kLanes only at a K that is not a multiple of 8).
template <class V, class T>
inline void load_lanes(V& v, const T* p, int64_t n) {
  if (n >= kLanes) {
    __builtin_memcpy(&v, p, sizeof v);
    return;
  }
  T tmp[kLanes] = {};
  for (int64_t i = 0; i < n; ++i) tmp[i] = p[i];
  __builtin_memcpy(&v, tmp, sizeof v);
}

// v's lanes [0, n) to p (n <= 0: nothing).
template <class V, class T>
inline void store_lanes(T* p, const V& v, int64_t n) {
  if (n >= kLanes) {
    __builtin_memcpy(p, &v, sizeof v);
    return;
  }
  for (int64_t i = 0; i < n; ++i) p[i] = v[i];
}

// The offset of each pool-window position's top-left tap from window position 0's.
int64_t window_offsets(const Geo& e, int64_t* out) {
  int64_t n = 0;
  for (int64_t i = 0; i < e.pr; ++i)
    for (int64_t j = 0; j < e.ps; ++j) out[n++] = i * e.sh * e.wp + j * e.sw;
  return n;
}

// One image's pooled outputs. wt: the weights as (taps, K16), K16 = K rounded up to 16 (zeros
// beyond K); bias likewise. kTaps / kWin: the taps and window positions when known at compile
// time (the reference CNN's 9 and 4: the loops unroll and the sums stay in registers), 0 else.
template <int kTaps, int kWin>
void forward_image(const Geo& e, const float* __restrict xp, const float* __restrict wt, const float* __restrict bias,
                   bool relu, float* __restrict y, uint8_t* __restrict argmax) {
  const int64_t taps = kTaps > 0 ? kTaps : e.taps;
  int64_t wofs[kWin > 0 ? kWin : kMaxWindow];
  const int64_t windows = window_offsets(e, wofs), win = kWin > 0 ? kWin : windows;
  const int64_t k16 = (e.k + 15) / 16 * 16;
  for (int64_t k0 = 0; k0 < e.k; k0 += 16) {  // 16 filters: two vectors per window position
    const int64_t lanes0 = std::min(kLanes, e.k - k0), lanes1 = std::min(kLanes, e.k - k0 - kLanes);
    f8 b0, b1;
    __builtin_memcpy(&b0, bias + k0, sizeof b0);
    __builtin_memcpy(&b1, bias + k0 + kLanes, sizeof b1);
    for (int64_t pp = 0; pp < e.pp; ++pp)
      for (int64_t pq = 0; pq < e.pq; ++pq) {
        const float* __restrict x0 = xp + pp * e.pr * e.sh * e.wp + pq * e.ps * e.sw;
        f8 acc0[kWin > 0 ? kWin : kMaxWindow], acc1[kWin > 0 ? kWin : kMaxWindow];
        for (int64_t w = 0; w < win; ++w) acc0[w] = b0, acc1[w] = b1;
        for (int64_t t = 0; t < taps; ++t) {
          f8 w0, w1;
          __builtin_memcpy(&w0, wt + t * k16 + k0, sizeof w0);
          __builtin_memcpy(&w1, wt + t * k16 + k0 + kLanes, sizeof w1);
          const int64_t o = e.off[t];
          for (int64_t w = 0; w < win; ++w) {
            const float v = x0[wofs[w] + o];
            acc0[w] += w0 * v;
            acc1[w] += w1 * v;
          }
        }
        // Strictly greater keeps the first maximum (the unfused pool's rule); a NaN is taken and
        // then kept (nothing compares greater than it).
        f8 best0 = f8{} - std::numeric_limits<float>::infinity(), best1 = best0;
        i8 arg0 = {}, arg1 = {};
        for (int64_t w = 0; w < win; ++w) {
          const i8 take0 = (acc0[w] > best0) | (best0 != best0 ? i8{} : acc0[w] != acc0[w]);
          const i8 take1 = (acc1[w] > best1) | (best1 != best1 ? i8{} : acc1[w] != acc1[w]);
          best0 = take0 ? acc0[w] : best0;
          best1 = take1 ? acc1[w] : best1;
          const i8 at = i8{} + static_cast<int32_t>(w);
          arg0 = take0 ? at : arg0;
          arg1 = take1 ? at : arg1;
        }
        if (relu) {  // max(relu(a), relu(b)) = relu(max(a, b)); a NaN stays a NaN
          best0 = best0 < 0.0f ? f8{} : best0;
          best1 = best1 < 0.0f ? f8{} : best1;
        }
        store_lanes(y + (pp * e.pq + pq) * e.k + k0, best0, lanes0);
        store_lanes(y + (pp * e.pq + pq) * e.k + k0 + kLanes, best1, lanes1);
        if (argmax) {
          store_lanes(argmax + (pp * e.pq + pq) * e.k + k0, __builtin_convertvector(arg0, b8), lanes0);
          store_lanes(argmax + (pp * e.pq + pq) * e.k + k0 + kLanes, __builtin_convertvector(arg1, b8), lanes1);
        }
      }
  }
}

// One image's weight and bias gradients, written to dw (taps, K8) and db (K8), K8 = K rounded up
// to 8. kTaps / kWin as in forward_image.
template <int kTaps, int kWin>
void backward_image(const Geo& e, const float* __restrict xp, const float* __restrict y,
                    const uint8_t* __restrict argmax, const float* __restrict dy, bool relu, float* __restrict dw,
                    float* __restrict db) {
  const int64_t taps = kTaps > 0 ? kTaps : e.taps;
  int64_t wofs[kWin > 0 ? kWin : kMaxWindow];
  const int64_t windows = window_offsets(e, wofs), win = kWin > 0 ? kWin : windows;
  const int64_t k8 = (e.k + kLanes - 1) / kLanes * kLanes;
  for (int64_t k0 = 0; k0 < e.k; k0 += kLanes) {
    const int64_t lanes = std::min(kLanes, e.k - k0);
    f8 sw[kTaps > 0 ? kTaps : kMaxTaps] = {};
    f8 sb = {};
    for (int64_t pp = 0; pp < e.pp; ++pp)
      for (int64_t pq = 0; pq < e.pq; ++pq) {
        const int64_t o = (pp * e.pq + pq) * e.k + k0;
        f8 g, yv;
        b8 a;
        load_lanes(g, dy + o, lanes);
        load_lanes(yv, y + o, lanes);
        load_lanes(a, argmax + o, lanes);
        if (relu) g = yv > 0.0f ? g : f8{};  // the ReLU's mask: its output was the maximum
        sb += g;
        const i8 arg = __builtin_convertvector(a, i8);
        const float* __restrict x0 = xp + pp * e.pr * e.sh * e.wp + pq * e.ps * e.sw;
        for (int64_t w = 0; w < win; ++w) {
          const f8 gm = arg == static_cast<int32_t>(w) ? g : f8{};
          const float* __restrict xw = x0 + wofs[w];
          for (int64_t t = 0; t < taps; ++t) sw[t] += gm * xw[e.off[t]];
        }
      }
    for (int64_t t = 0; t < taps; ++t) __builtin_memcpy(dw + t * k8 + k0, &sw[t], sizeof sw[t]);
    __builtin_memcpy(db + k0, &sb, sizeof sb);
  }
}

#if defined(EMBER_AVX512) && defined(__FMA__)
// forward_image and backward_image in 16 lanes (one AVX-512 register per 16 filters, where the
// AVX2 versions take two of 8), for K a multiple of 16: each lane's operations and their order are
// those of the 8-lane versions, so the results are the same bits.
typedef int32_t i16v __attribute__((vector_size(64)));
typedef uint8_t b16v __attribute__((vector_size(16)));
using simd::f16;
constexpr int64_t kWide = 16;

template <int kTaps, int kWin>
EMBER_AVX512 void forward_image16(const Geo& e, const float* __restrict xp, const float* __restrict wt,
                                  const float* __restrict bias, bool relu, float* __restrict y,
                                  uint8_t* __restrict argmax) {
  const int64_t taps = kTaps > 0 ? kTaps : e.taps;
  int64_t wofs[kWin > 0 ? kWin : kMaxWindow];
  const int64_t windows = window_offsets(e, wofs), win = kWin > 0 ? kWin : windows;
  const int64_t k16 = e.k;
  for (int64_t k0 = 0; k0 < e.k; k0 += kWide) {
    f16 b;
    __builtin_memcpy(&b, bias + k0, sizeof b);
    for (int64_t pp = 0; pp < e.pp; ++pp)
      for (int64_t pq = 0; pq < e.pq; ++pq) {
        const float* __restrict x0 = xp + pp * e.pr * e.sh * e.wp + pq * e.ps * e.sw;
        f16 acc[kWin > 0 ? kWin : kMaxWindow];
        for (int64_t w = 0; w < win; ++w) acc[w] = b;
        for (int64_t t = 0; t < taps; ++t) {
          f16 wv;
          __builtin_memcpy(&wv, wt + t * k16 + k0, sizeof wv);
          const int64_t o = e.off[t];
          for (int64_t w = 0; w < win; ++w) acc[w] += wv * x0[wofs[w] + o];
        }
        f16 best = f16{} - std::numeric_limits<float>::infinity();
        i16v arg = {};
        for (int64_t w = 0; w < win; ++w) {
          const i16v take = (acc[w] > best) | (best != best ? i16v{} : acc[w] != acc[w]);
          best = take ? acc[w] : best;
          arg = take ? i16v{} + static_cast<int32_t>(w) : arg;
        }
        if (relu) best = best < 0.0f ? f16{} : best;
        __builtin_memcpy(y + (pp * e.pq + pq) * e.k + k0, &best, sizeof best);
        if (argmax) {
          const b16v a = __builtin_convertvector(arg, b16v);
          __builtin_memcpy(argmax + (pp * e.pq + pq) * e.k + k0, &a, sizeof a);
        }
      }
  }
}

template <int kTaps, int kWin>
EMBER_AVX512 void backward_image16(const Geo& e, const float* __restrict xp, const float* __restrict y,
                                   const uint8_t* __restrict argmax, const float* __restrict dy, bool relu,
                                   float* __restrict dw, float* __restrict db) {
  const int64_t taps = kTaps > 0 ? kTaps : e.taps;
  int64_t wofs[kWin > 0 ? kWin : kMaxWindow];
  const int64_t windows = window_offsets(e, wofs), win = kWin > 0 ? kWin : windows;
  const int64_t k8 = e.k;
  for (int64_t k0 = 0; k0 < e.k; k0 += kWide) {
    f16 sw[kTaps > 0 ? kTaps : kMaxTaps] = {};
    f16 sb = {};
    for (int64_t pp = 0; pp < e.pp; ++pp)
      for (int64_t pq = 0; pq < e.pq; ++pq) {
        const int64_t o = (pp * e.pq + pq) * e.k + k0;
        f16 g, yv;
        b16v a;
        __builtin_memcpy(&g, dy + o, sizeof g);
        __builtin_memcpy(&yv, y + o, sizeof yv);
        __builtin_memcpy(&a, argmax + o, sizeof a);
        if (relu) g = yv > 0.0f ? g : f16{};
        sb += g;
        const i16v arg = __builtin_convertvector(a, i16v);
        const float* __restrict x0 = xp + pp * e.pr * e.sh * e.wp + pq * e.ps * e.sw;
        for (int64_t w = 0; w < win; ++w) {
          const f16 gm = arg == static_cast<int32_t>(w) ? g : f16{};
          const float* __restrict xw = x0 + wofs[w];
          for (int64_t t = 0; t < taps; ++t) sw[t] += gm * xw[e.off[t]];
        }
      }
    for (int64_t t = 0; t < taps; ++t) __builtin_memcpy(dw + t * k8 + k0, &sw[t], sizeof sw[t]);
    __builtin_memcpy(db + k0, &sb, sizeof sb);
  }
}
#endif

void check(const Tensor& t, DType dt, const Shape& s, Layout layout, const char* what, const Conv2dShape& g) {
  EMBER_CHECK(t.shape() == s && t.layout() == layout && t.dtype() == dt && t.device().is_cpu(), ShapeError,
              std::string("conv2d+maxpool2d (cpu): ") + what + " must be a " + dtype_name(dt) + " " +
                  (layout == Layout::NHWC ? "NHWC" : "row-major") + " cpu tensor of shape " + s.str() + " for " +
                  g.str() + ", got " + t.str());
}

void check_common(const Conv2dShape& g, const Pool2dShape& pool, const Tensor& x) {
  EMBER_CHECK(conv2d_maxpool_fits(g, pool) && pool.n == g.n && pool.c == g.k && pool.h == g.p && pool.w == g.q,
              ArgumentError, "conv2d+maxpool2d (cpu): this pair does not run fused: " + g.str() + ", " + pool.str());
  const Shape xs{g.n, g.c, g.h, g.w};
  EMBER_CHECK(x.shape() == xs && x.dtype() == DType::F32 && x.device().is_cpu() &&
                  (x.layout() == Layout::RowMajor || x.layout() == Layout::NHWC),
              ShapeError,
              "conv2d+maxpool2d (cpu): input must be an f32 cpu tensor of shape " + xs.str() + ", got " + x.str());
}

// Whether the 16-lane kernels run: the CPU has AVX-512 (and it is not capped), K a multiple of 16.
// The 8-lane kernels' multiply-adds are fused where the build's target has FMA (the default
// x86-64-v3), as the 16-lane ones always are: only then are their bits the same.
bool wide_lanes(const Geo& e, bool allow_avx512) {
#if defined(EMBER_AVX512) && defined(__FMA__)
  return allow_avx512 && e.k % 16 == 0 && cpu_avx512();
#else
  (void)e, (void)allow_avx512;
  return false;
#endif
}

// Grows scratch to at least `floats` (never shrinks: batch sizes alternate, e.g. an epoch's
// last batch, without a reallocation each time).
float* scratch_floats(Tensor& scratch, int64_t floats) {
  if (!scratch.defined() || scratch.numel() < floats) scratch = Tensor::empty(Shape{floats}, DType::F32, Device::cpu());
  return scratch.f32();
}
}  // namespace

bool conv2d_maxpool_fits(const Conv2dShape& conv, const Pool2dShape& pool) {
  return conv.c * conv.r * conv.s <= kMaxTaps && pool.r == pool.stride_h && pool.s == pool.stride_w &&
         pool.pad_top == 0 && pool.pad_left == 0 && pool.pad_bottom == 0 && pool.pad_right == 0 &&
         pool.r * pool.s <= kMaxWindow;
}

void conv2d_maxpool_forward(const Conv2dShape& g, const Pool2dShape& pool, const Tensor& x, const Tensor& w,
                            const Tensor& b, Tensor& y, Tensor* argmax, Tensor& scratch, bool allow_avx512) {
  check_common(g, pool, x);
  const Geo e = geo(g, pool);
  check(w, DType::F32, {g.k, g.c, g.r, g.s}, Layout::RowMajor, "weights", g);
  check(b, DType::F32, {g.k}, Layout::RowMajor, "bias", g);
  const Shape ys{g.n, g.k, pool.p, pool.q};
  check(y, DType::F32, ys, Layout::NHWC, "output", g);
  if (argmax) check(*argmax, DType::U8, ys, Layout::NHWC, "argmax", g);

  // Scratch: the weights as (taps, K16) and the bias as (K16), zeros beyond K, so each tap's
  // filters are whole vectors; one padded image per thread.
  const int64_t threads = omp_get_max_threads(), img = e.c * e.hp * e.wp, k16 = (e.k + 15) / 16 * 16;
  float* wt = scratch_floats(scratch, (e.taps + 1) * k16 + threads * img);
  float* bias = wt + e.taps * k16;
  float* pad = bias + k16;
  std::fill(wt, pad, 0.0f);
  const float* wk = w.f32();
  for (int64_t k = 0; k < e.k; ++k) {
    for (int64_t t = 0; t < e.taps; ++t) wt[t * k16 + k] = wk[k * e.taps + t];
    bias[k] = b.f32()[k];
  }
  const bool reference = e.taps == 9 && e.pr * e.ps == 4;  // 3x3 one-channel kernels, 2x2 pools
  [[maybe_unused]] const bool wide = wide_lanes(e, allow_avx512);
  const int64_t per_image = e.pp * e.pq * e.k;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.n; ++n) {
    const float* xp = image(g, e, x, n, pad + omp_get_thread_num() * img);
    float* yn = y.f32() + n * per_image;
    uint8_t* an = argmax ? argmax->data<uint8_t>() + n * per_image : nullptr;
#if defined(EMBER_AVX512) && defined(__FMA__)
    if (wide) {
      if (reference)
        forward_image16<9, 4>(e, xp, wt, bias, g.relu, yn, an);
      else
        forward_image16<0, 0>(e, xp, wt, bias, g.relu, yn, an);
      continue;
    }
#endif
    if (reference)
      forward_image<9, 4>(e, xp, wt, bias, g.relu, yn, an);
    else
      forward_image<0, 0>(e, xp, wt, bias, g.relu, yn, an);
  }
}

void conv2d_maxpool_backward(const Conv2dShape& g, const Pool2dShape& pool, const Tensor& x, const Tensor& y,
                             const Tensor& argmax, const Tensor& dy, Tensor& dw, Tensor& db, Tensor& scratch,
                             bool allow_avx512) {
  check_common(g, pool, x);
  const Geo e = geo(g, pool);
  const Shape ys{g.n, g.k, pool.p, pool.q};
  check(y, DType::F32, ys, Layout::NHWC, "output", g);
  check(argmax, DType::U8, ys, Layout::NHWC, "argmax", g);
  check(dy, DType::F32, ys, Layout::NHWC, "output gradient", g);
  check(dw, DType::F32, {g.k, g.c, g.r, g.s}, Layout::RowMajor, "weight gradient", g);
  check(db, DType::F32, {g.k}, Layout::RowMajor, "bias gradient", g);

  // Scratch: one padded image per thread, then each image's partial sums: (taps, K8) and (K8).
  const int64_t threads = omp_get_max_threads(), img = e.c * e.hp * e.wp, k8 = (e.k + kLanes - 1) / kLanes * kLanes;
  const int64_t part = (e.taps + 1) * k8;
  float* pad = scratch_floats(scratch, threads * img + g.n * part);
  float* partial = pad + threads * img;
  const bool reference = e.taps == 9 && e.pr * e.ps == 4;
  [[maybe_unused]] const bool wide = wide_lanes(e, allow_avx512);
  const int64_t per_image = e.pp * e.pq * e.k;
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < g.n; ++n) {
    const float* xp = image(g, e, x, n, pad + omp_get_thread_num() * img);
    const float* yn = y.f32() + n * per_image;
    const uint8_t* an = argmax.data<uint8_t>() + n * per_image;
    const float* gn = dy.f32() + n * per_image;
    float* pw = partial + n * part;
#if defined(EMBER_AVX512) && defined(__FMA__)
    if (wide) {
      if (reference)
        backward_image16<9, 4>(e, xp, yn, an, gn, g.relu, pw, pw + e.taps * k8);
      else
        backward_image16<0, 0>(e, xp, yn, an, gn, g.relu, pw, pw + e.taps * k8);
      continue;
    }
#endif
    if (reference)
      backward_image<9, 4>(e, xp, yn, an, gn, g.relu, pw, pw + e.taps * k8);
    else
      backward_image<0, 0>(e, xp, yn, an, gn, g.relu, pw, pw + e.taps * k8);
  }
  // The images' sums in the batch's order (core/pairwise_sum.h), whatever the thread count: each
  // group's images in image order, the groups as a pairwise tree; dw back to (K, taps).
  float* dwk = dw.f32();
  float* dbk = db.f32();
  const auto group_sum = [&](int64_t j, int64_t i) {
    float s = 0.0f;
    for (int64_t n = j * kBatchGroupRows; n < std::min(g.n, (j + 1) * kBatchGroupRows); ++n) s += partial[n * part + i];
    return s;
  };
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < e.k; ++k) {
    for (int64_t t = 0; t <= e.taps; ++t)
      (t < e.taps ? dwk[k * e.taps + t] : dbk[k]) = pairwise_sum(0, batch_groups(g.n), t * k8 + k, group_sum);
  }
}

}  // namespace ember::cpu
