// Conv2D in bf16 (conv2d_bf16.h). The forward on oneDNN's primitive, the data gradient on its
// backward-data primitive or, with stride 1, as a forward convolution (make_forward_and_data), asked
// for direct convolution (oneDNN's Winograd would turn structural zeros into rounding residue), one
// Plan per shape and thread count (oneDNN splits the work for the count it was created under),
// cached per thread as conv2d.cpp's, with the reorders of Ember's fp32 (K, C, R, S) weights into the
// bf16 format each prefers. The weight gradient on oneDNN's primitive, or as an im2col product on
// matmul_bf16 (product_weight_gradient) or a forward convolution over the batch
// (make_weight_gradient_forward) where those are faster.
#include "conv2d_bf16.h"

#include <omp.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

#include "../../core/cpu/cpu_features.h"
#include "../../core/cpu/dnnl_context.h"
#include "../../core/error.h"
#include "matmul_bf16.h"
#include "simd.h"

namespace ember::cpu {

namespace {
using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

struct Plan {
  dnnl::convolution_forward::primitive_desc fwd_pd;
  dnnl::convolution_forward fwd;
  // The data gradient: oneDNN's backward-data primitive, or (dx_forward, stride 1) a forward
  // convolution of dy with the flipped, transposed weights (wflip: Ember's f32 copy of them).
  bool dx_forward = false;
  dnnl::convolution_backward_data::primitive_desc bwd_data_pd;
  dnnl::convolution_backward_data bwd_data;
  dnnl::convolution_forward::primitive_desc dx_pd;
  dnnl::convolution_forward dx_fwd;
  std::vector<float> wflip;
  memory wflip_user;
  // The weight gradient: oneDNN's primitive, or (product) an im2col product (see product_weight_gradient),
  // or (wg_forward) a forward convolution over the batch (see make_weight_gradient_forward).
  bool product = false;
  bool wg_forward = false;
  dnnl::convolution_forward::primitive_desc wg_pd;
  dnnl::convolution_forward wg_fwd;
  memory wg_x_view, wg_dy_view, wg_src, wg_wei, wg_dst;  // the views point at the kept bf16 x and dy
  dnnl::reorder wg_x_to_src, wg_dy_to_wei;
  bool wg_own_copies = false;  // dy by dy_to_blocked rather than a reorder (0.02 against 0.2 ms: its layout fits)
  std::vector<float> wg_out;   // dw as (C, R, S, K)
  dnnl::convolution_backward_weights::primitive_desc bwd_w_pd;
  dnnl::convolution_backward_weights bwd_w;
  memory diff_wei_user, diff_wei;
  std::optional<dnnl::reorder> diff_wei_to_user;
  // Handles pointed at the caller's buffers on each call.
  memory x16, y, bias, wei_user, dy16, dx;
  // The weights in each primitive's bf16 format.
  memory wei_fwd, wei_bwd;
  dnnl::reorder wei_to_fwd, wei_to_bwd;
};

memory::dims dims4(int64_t a, int64_t b, int64_t c, int64_t d) { return {a, b, c, d}; }

// The weight gradient as an im2col product (conv2d_backward_bf16) for strided convolutions with
// outputs of at most 16 positions per image, where oneDNN 2.6's bf16 weight-gradient primitive is
// slow (measured in the reference CNN's step at batch 64 on AMX: 64 -> 64 channels with 3x3 outputs
// 0.42 ms against 0.05 for the product); on larger outputs the primitive won (13x13 -> 11x11, 32 -> 64
// channels: 0.49 ms against 0.18 + 0.48 for im2col and the product, their data out of cache). With
// stride 1 the forward convolution over the batch (make_weight_gradient_forward) beats both: the
// 3x3-output one 0.24 against 0.27 ms for the layer's backward.
bool product_weight_gradient(const Conv2dShape& g) { return g.p * g.q <= 16 && (g.stride_h != 1 || g.stride_w != 1); }

// Whether oneDNN gave a primitive its fast kernels (brgconv, jit) rather than a reference or
// gemm-based one: the forward formulations below are used only then.
template <class Pd>
bool fast_kernel(const Pd& pd) {
  const std::string name = pd.impl_info_str();
  return name.rfind("brg", 0) == 0 || name.rfind("jit", 0) == 0;
}

// The forward and data-gradient primitives of a Plan, and the weights' reorders for them.
void make_forward_and_data(const Conv2dShape& g, bool out16, Plan& p) {
  auto& eng = dnnl_engine();
  const memory::desc x16(dims4(g.n, g.c, g.h, g.w), dt::bf16, tag::nhwc),
      x32(dims4(g.n, g.c, g.h, g.w), dt::f32, tag::nhwc), y32(dims4(g.n, g.k, g.p, g.q), dt::f32, tag::nhwc),
      y16(dims4(g.n, g.k, g.p, g.q), dt::bf16, tag::nhwc), bias({g.k}, dt::f32, tag::x),
      wei_user(dims4(g.k, g.c, g.r, g.s), dt::f32, tag::oihw), wei16(dims4(g.k, g.c, g.r, g.s), dt::bf16, tag::any);
  const memory::dims strides{g.stride_h, g.stride_w}, pad_l{g.pad_top, g.pad_left}, pad_r{g.pad_bottom, g.pad_right};
  const auto direct = dnnl::algorithm::convolution_direct;
  dnnl::primitive_attr attr;
  if (g.relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  p.fwd_pd = dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_training, direct, x16, wei16, bias, out16 ? y16 : y32,
                                      strides, pad_l, pad_r),
      attr, eng);
  p.fwd = dnnl::convolution_forward(p.fwd_pd);
  p.x16 = memory(x16, eng, DNNL_MEMORY_NONE);
  p.y = memory(out16 ? y16 : y32, eng, DNNL_MEMORY_NONE);
  p.bias = memory(bias, eng, DNNL_MEMORY_NONE);
  p.wei_user = memory(wei_user, eng, DNNL_MEMORY_NONE);
  p.dy16 = memory(y16, eng, DNNL_MEMORY_NONE);
  p.dx = memory(x32, eng, DNNL_MEMORY_NONE);
  p.wei_fwd = memory(p.fwd_pd.weights_desc(), eng);
  p.wei_to_fwd = dnnl::reorder(p.wei_user, p.wei_fwd);

  // dx[n, c, h, w] = sum dy[n, k, h + pad_top - r, ...] w[k, c, r, s]: with stride 1, a forward
  // convolution of dy by w'[c, k, r, s] = w[k, c, R-1-r, S-1-s] padded by R-1-pad_top above (and
  // likewise on each side), which oneDNN 2.6 runs on its brgconv kernels, faster than its
  // backward-data primitive (jit): in the reference CNN's step at batch 64 on AMX, the second
  // convolution's data gradient 0.16-0.18 against 0.26 ms with the weights' reorder.
  const bool pads_fit = g.pad_top < g.r && g.pad_bottom < g.r && g.pad_left < g.s && g.pad_right < g.s;
  if (g.stride_h == 1 && g.stride_w == 1 && pads_fit) {
    const memory::desc wflip_user(dims4(g.c, g.k, g.r, g.s), dt::f32, tag::oihw),
        wflip16(dims4(g.c, g.k, g.r, g.s), dt::bf16, tag::any);
    p.dx_pd = dnnl::convolution_forward::primitive_desc(
        dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, direct, y16, wflip16, x32, {1, 1},
                                        {g.r - 1 - g.pad_top, g.s - 1 - g.pad_left},
                                        {g.r - 1 - g.pad_bottom, g.s - 1 - g.pad_right}),
        eng);
    p.dx_forward = fast_kernel(p.dx_pd);
    if (p.dx_forward) {
      p.dx_fwd = dnnl::convolution_forward(p.dx_pd);
      p.wflip.resize(size_t(g.c * g.k * g.r * g.s));
      p.wflip_user = memory(wflip_user, eng, p.wflip.data());
      p.wei_bwd = memory(p.dx_pd.weights_desc(), eng);
      p.wei_to_bwd = dnnl::reorder(p.wflip_user, p.wei_bwd);
      return;
    }
  }
  p.bwd_data_pd = dnnl::convolution_backward_data::primitive_desc(
      dnnl::convolution_backward_data::desc(direct, x32, wei16, y16, strides, pad_l, pad_r), eng, p.fwd_pd);
  p.bwd_data = dnnl::convolution_backward_data(p.bwd_data_pd);
  p.wei_bwd = memory(p.bwd_data_pd.weights_desc(), eng);
  p.wei_to_bwd = dnnl::reorder(p.wei_user, p.wei_bwd);
}

// The weight gradient of a stride-1 convolution as a forward convolution over the batch:
//   dw'[c, k, r, s] = sum over n, p, q of x'[c, n, p + r - pad_top, q + s - pad_left] dy'[k, n, p, q],
// a convolution of x' (x with its batch and channel axes swapped: C "images" of N channels) by dy'
// (the output gradient as K filters of N channels and a P x Q window) with the original padding,
// whose R x S output is dw. oneDNN 2.6 runs it on its AMX kernels (brgconv at batch 64; jit for a
// few images), where its bf16 weight-gradient primitive is a slower jit kernel. Measured in
// training steps at batch 64 on AMX (2 threads), the primitive against this convolution + x's swap
// (oneDNN's reorder then; now AVX-512 gathers where they fit) + dy's copy: 32 -> 64 channels,
// 11x11 outputs (the reference CNN's second convolution) 0.50 against 0.25 + 0.055 + 0.02 ms;
// 64 -> 64, 7x7 outputs (the resnet's) 0.50 against 0.19 + 0.07 + 0.01; but 32 -> 32, 14x14
// outputs 0.28 against 0.29 + 0.06 + 0.03. So for outputs of at most 128 positions per image; only
// where oneDNN offers brgconv/jit for it; false otherwise.
bool make_weight_gradient_forward(const Conv2dShape& g, Plan& p) {
  if (g.stride_h != 1 || g.stride_w != 1 || g.p * g.q > 128) return false;
  auto& eng = dnnl_engine();
  // The kept copies as seen by the swapped axes: x (N, H, W, C) as (C, N, H, W), dy (N, P, Q, K) as
  // (K, N, P, Q).
  const memory::desc x_view(dims4(g.c, g.n, g.h, g.w), dt::bf16, memory::dims{1, g.h * g.w * g.c, g.w * g.c, g.c}),
      dy_view(dims4(g.k, g.n, g.p, g.q), dt::bf16, memory::dims{1, g.p * g.q * g.k, g.q * g.k, g.k}),
      src(dims4(g.c, g.n, g.h, g.w), dt::bf16, tag::nhwc), wei(dims4(g.k, g.n, g.p, g.q), dt::bf16, tag::any),
      dst(dims4(g.c, g.k, g.r, g.s), dt::f32, tag::nhwc);
  p.wg_pd = dnnl::convolution_forward::primitive_desc(
      dnnl::convolution_forward::desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct, src, wei,
                                      dst, {1, 1}, {g.pad_top, g.pad_left}, {g.pad_bottom, g.pad_right}),
      eng);
  if (!fast_kernel(p.wg_pd)) return false;
  p.wg_fwd = dnnl::convolution_forward(p.wg_pd);
  p.wg_x_view = memory(x_view, eng, DNNL_MEMORY_NONE);
  p.wg_dy_view = memory(dy_view, eng, DNNL_MEMORY_NONE);
  p.wg_src = memory(p.wg_pd.src_desc(), eng);
  p.wg_wei = memory(p.wg_pd.weights_desc(), eng);
  p.wg_out.resize(size_t(g.c * g.r * g.s * g.k));
  p.wg_dst = memory(p.wg_pd.dst_desc(), eng, p.wg_out.data());
  p.wg_x_to_src = dnnl::reorder(p.wg_x_view, p.wg_src);
  p.wg_dy_to_wei = dnnl::reorder(p.wg_dy_view, p.wg_wei);
  // dy_to_blocked's layout, as oneDNN names it for N a multiple of 32 (the same bytes) or not.
  const memory::desc pairs(dims4(g.k, g.n, g.p, g.q), dt::bf16, tag::AcdB32a2b),
      blocks(dims4(g.k, g.n, g.p, g.q), dt::bf16, tag::AcdB16b32a2b);
  p.wg_own_copies = g.k % 32 == 0 && g.n % 2 == 0 &&
                    (p.wg_pd.weights_desc() == pairs || (g.n % 32 == 0 && p.wg_pd.weights_desc() == blocks));
  return true;
}

// dy' for the forward weight gradient: dy (N, P, Q, K) as (K, N, P, Q) in oneDNN's AcdB32a2b (for N
// a multiple of 32 also named AcdB16b32a2b): blocks of 32 filters x 2 images, [k % 32][n % 2] inside,
// ordered (k / 32, p, q, n / 2). K a multiple of 32, N even.
// Two images' 32 filters interleaved: o[2k] = a[k], o[2k + 1] = b[k].
#if defined(__x86_64__)
__attribute__((target("avx512f,avx512bw"))) void interleave32_avx512(const bf16* a, const bf16* b, bf16* o) {
  alignas(64) static constexpr uint16_t lo[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                  8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  const __m512i il = _mm512_load_si512(lo), ih = _mm512_add_epi16(il, _mm512_set1_epi16(16));
  const __m512i va = _mm512_loadu_si512(a), vb = _mm512_loadu_si512(b);
  _mm512_storeu_si512(o, _mm512_permutex2var_epi16(va, il, vb));
  _mm512_storeu_si512(o + 32, _mm512_permutex2var_epi16(va, ih, vb));
}
#endif
void interleave32(const bf16* a, const bf16* b, bf16* o) {
  for (int64_t k = 0; k < 32; ++k) {
    o[2 * k] = a[k];
    o[2 * k + 1] = b[k];
  }
}

// x' for the forward weight gradient: x (N, H, W, C) -> (C, H, W, N) (oneDNN's nhwc of the swapped
// axes). With AVX-512, 16 images' channels c and c + 1 by one 32-bit gather, split into the two
// rows; N a multiple of 16, C even (swap_fits).
bool swap_fits(const Conv2dShape& g) {
#if defined(EMBER_AVX512)
  return g.n % 16 == 0 && g.c % 2 == 0 && g.n * g.h * g.w * g.c < (int64_t{1} << 31) && cpu_avx512();
#else
  (void)g;
  return false;
#endif
}
#if defined(EMBER_AVX512)
EMBER_AVX512 void swap_batch_and_channels(const Conv2dShape& g, const bf16* x, bf16* out) {
  typedef uint32_t u16v __attribute__((vector_size(64)));
  typedef uint16_t h16 __attribute__((vector_size(32)));
  const int64_t hw = g.h * g.w;
  alignas(64) int32_t step[16];
  for (int l = 0; l < 16; ++l) step[l] = static_cast<int32_t>(l * hw * g.c / 2);  // 32-bit units per image
  const __m512i lanes = _mm512_load_si512(step);
#pragma omp parallel for schedule(static) if (!omp_in_parallel())
  for (int64_t i = 0; i < hw; ++i)
    for (int64_t n0 = 0; n0 < g.n; n0 += 16) {
      const bf16* base = x + (n0 * hw + i) * g.c;
      for (int64_t c = 0; c < g.c; c += 2) {
        const __m512i v =
            _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), 0xFFFF, lanes, static_cast<const void*>(base + c), 4);
        u16v u;
        __builtin_memcpy(&u, &v, sizeof u);
        const h16 lo = __builtin_convertvector(u, h16), hi = __builtin_convertvector(u >> 16, h16);
        __builtin_memcpy(out + (c * hw + i) * g.n + n0, &lo, sizeof lo);
        __builtin_memcpy(out + ((c + 1) * hw + i) * g.n + n0, &hi, sizeof hi);
      }
    }
}
#else
void swap_batch_and_channels(const Conv2dShape&, const bf16*, bf16*) {}  // never called (swap_fits)
#endif

void dy_to_blocked(const Conv2dShape& g, const bf16* dy, bf16* out) {
  const int64_t pq = g.p * g.q, kb = g.k / 32, pairs = g.n / 2;
#if defined(__x86_64__)
  static const bool bw = cpu_avx512() && __builtin_cpu_supports("avx512bw");  // the cap respected
  void (*const pair)(const bf16*, const bf16*, bf16*) = bw ? interleave32_avx512 : interleave32;
#else
  void (*const pair)(const bf16*, const bf16*, bf16*) = interleave32;
#endif
  // In the output's order: each thread writes one run of it (by pairs of images instead, reading
  // each image front to back, the step's weight gradient took 0.08 ms longer).
#pragma omp parallel for collapse(2) schedule(static) if (!omp_in_parallel())
  for (int64_t ko = 0; ko < kb; ++ko)
    for (int64_t i = 0; i < pq; ++i) {
      bf16* blocks = out + (ko * pq + i) * pairs * 64;
      for (int64_t j = 0; j < pairs; ++j) {
        const bf16* a = dy + (2 * j * pq + i) * g.k + ko * 32;
        pair(a, a + pq * g.k, blocks + j * 64);  // images 2j and 2j + 1
      }
    }
}

// out16: the forward writes bf16 (conv2d_forward_bf16_out).
std::unique_ptr<Plan> make_plan(const Conv2dShape& g, bool out16) {
  auto& eng = dnnl_engine();
  auto p = std::make_unique<Plan>();
  make_forward_and_data(g, out16, *p);
  p->product = product_weight_gradient(g);
  if (!p->product) p->wg_forward = make_weight_gradient_forward(g, *p);
  // Small outputs whose forward formulation oneDNN has no fast kernel for: the product still beats
  // the primitive there.
  if (!p->wg_forward && g.p * g.q <= 16) p->product = true;
  if (!p->product && !p->wg_forward) {
    const memory::desc x16(dims4(g.n, g.c, g.h, g.w), dt::bf16, tag::nhwc),
        y16(dims4(g.n, g.k, g.p, g.q), dt::bf16, tag::nhwc), wei_user(dims4(g.k, g.c, g.r, g.s), dt::f32, tag::oihw);
    p->bwd_w_pd = dnnl::convolution_backward_weights::primitive_desc(
        dnnl::convolution_backward_weights::desc(
            dnnl::algorithm::convolution_direct, x16, memory::desc(dims4(g.k, g.c, g.r, g.s), dt::f32, tag::any), y16,
            {g.stride_h, g.stride_w}, {g.pad_top, g.pad_left}, {g.pad_bottom, g.pad_right}),
        eng, p->fwd_pd);
    p->bwd_w = dnnl::convolution_backward_weights(p->bwd_w_pd);
    p->diff_wei_user = memory(wei_user, eng, DNNL_MEMORY_NONE);
    if (p->bwd_w_pd.diff_weights_desc() == wei_user) {
      p->diff_wei = p->diff_wei_user;
    } else {
      p->diff_wei = memory(p->bwd_w_pd.diff_weights_desc(), eng);
      p->diff_wei_to_user = dnnl::reorder(p->diff_wei, p->diff_wei_user);
    }
  }
  return p;
}

Plan& plan_for(const Conv2dShape& g, bool out16 = false) {
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                         int64_t, int64_t, int64_t, bool, bool, int>;
  thread_local std::map<Key, std::unique_ptr<Plan>> cache;
  const Key key{g.n,        g.c,       g.h,        g.w,          g.k,         g.r,    g.s,   g.stride_h,
                g.stride_w, g.pad_top, g.pad_left, g.pad_bottom, g.pad_right, g.relu, out16, omp_get_max_threads()};
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, make_plan(g, out16)).first;
  return *it->second;
}

// Images per product of the weight gradient: their im2col rows in at most 8 MiB.
int64_t chunk_images(const Conv2dShape& g) {
  const int64_t per_image = g.p * g.q * g.r * g.s * g.c * int64_t{sizeof(bf16)};
  return std::clamp<int64_t>((int64_t{8} << 20) / std::max<int64_t>(per_image, 1), 1, g.n);
}

// cols: one row per output position of the images [n0, n0 + count), (R, S, C) across, from x
// (NHWC); zeros where the window leaves the image (padding).
void im2col(const Conv2dShape& g, const bf16* x, int64_t n0, int64_t count, bf16* cols) {
  const int64_t width = g.r * g.s * g.c, rows = count * g.p * g.q;
#pragma omp parallel for schedule(static) if (rows * width > 65536 && !omp_in_parallel())
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t n = n0 + i / (g.p * g.q), p = i / g.q % g.p, q = i % g.q;
    bf16* out = cols + i * width;
    for (int64_t r = 0; r < g.r; ++r) {
      const int64_t h = p * g.stride_h - g.pad_top + r;
      for (int64_t s = 0; s < g.s; ++s, out += g.c) {
        const int64_t w = q * g.stride_w - g.pad_left + s;
        if (h < 0 || h >= g.h || w < 0 || w >= g.w)
          std::fill_n(out, g.c, bf16{0});
        else
          std::copy_n(x + ((n * g.h + h) * g.w + w) * g.c, g.c, out);
      }
    }
  }
}

// The output gradient's bf16 copies: dy16 (rows x K, as dy) for the data gradient, and (unless null)
// dyt, its transpose per chunk of `chunk_rows` rows (each chunk K x its rows, the chunks one after another)
// for the weight gradient's products; with `mask`, dy where mask > 0, else 0 (a fused ReLU). db =
// the column sums of that fp32 gradient, per thread in row order, the threads' sums in thread order.
void convert_dy(const float* dy, const float* mask, int64_t rows, int64_t k, int64_t chunk_rows, bf16* dy16, bf16* dyt,
                float* db) {
  constexpr int64_t kTile = 16;
  const int64_t tiles = (rows + kTile - 1) / kTile;
  const int threads = omp_in_parallel() || rows * k < 65536 ? 1 : omp_get_max_threads();
  thread_local std::vector<float> partial;
  partial.assign(size_t(threads * k), 0.0f);
  float* const all_sums = partial.data();  // the caller's (thread_local: each pool thread has its own)
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    float* const sums = all_sums + omp_get_thread_num() * k;
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t i0 = t * kTile, i1 = std::min(rows, i0 + kTile);
      for (int64_t i = i0; i < i1; ++i) {
        const float* row = dy + i * k;
        const float* m = mask ? mask + i * k : nullptr;
        bf16* out = dy16 + i * k;
        if (m) {
#pragma omp simd
          for (int64_t j = 0; j < k; ++j) {
            const float v = m[j] > 0.0f ? row[j] : 0.0f;
            sums[j] += v;
            out[j] = to_bf16(v);
          }
        } else {
#pragma omp simd
          for (int64_t j = 0; j < k; ++j) {
            sums[j] += row[j];
            out[j] = to_bf16(row[j]);
          }
        }
      }
      // The tile's transpose, from the bf16 rows just written (in L1); a tile that spans two
      // chunks row by row.
      if (!dyt) continue;
      const int64_t c0 = i0 / chunk_rows * chunk_rows, c_rows = std::min(chunk_rows, rows - c0);
      if (i1 <= c0 + c_rows) {
        bf16* col = dyt + c0 * k + (i0 - c0);
        for (int64_t j = 0; j < k; ++j)
          for (int64_t i = i0; i < i1; ++i) col[j * c_rows + (i - i0)] = dy16[i * k + j];
      } else {
        for (int64_t i = i0; i < i1; ++i) {
          const int64_t d0 = i / chunk_rows * chunk_rows, d_rows = std::min(chunk_rows, rows - d0);
          for (int64_t j = 0; j < k; ++j) dyt[d0 * k + j * d_rows + (i - d0)] = dy16[i * k + j];
        }
      }
    }
  }
  std::fill_n(db, k, 0.0f);
  for (int t = 0; t < threads; ++t)
    for (int64_t j = 0; j < k; ++j) db[j] += partial[size_t(t * k + j)];
}

void check(const Tensor& t, const Shape& want, Layout layout, const char* what, const Conv2dShape& g) {
  EMBER_CHECK(t.shape() == want && t.layout() == layout && t.dtype() == DType::F32 && t.device().is_cpu(), ShapeError,
              std::string("conv2d (cpu, bf16): ") + what + " must be an f32 " +
                  (layout == Layout::NHWC ? "NHWC" : "row-major") + " cpu tensor of shape " + want.str() + " for " +
                  g.str() + ", got " + t.str());
}
}  // namespace

namespace {
// x rounded into keep.x, then the plan's forward into y (f32 or bf16, as the plan was made).
void run_forward(const Conv2dShape& g, Plan& p, const Tensor& x, const Tensor& w, const Tensor& b, void* y,
                 Bf16Buffers& keep) {
  check(x, Shape{g.n, g.c, g.h, g.w}, Layout::NHWC, "input", g);
  check(w, Shape{g.k, g.c, g.r, g.s}, Layout::RowMajor, "weights", g);
  check(b, Shape{g.k}, Layout::RowMajor, "bias", g);
  auto& strm = dnnl_stream();
  keep.x.resize(size_t(x.numel()));
  to_bf16(x.f32(), keep.x.data(), x.numel());
  p.wei_user.set_data_handle(const_cast<float*>(w.f32()));
  p.wei_to_fwd.execute(strm, p.wei_user, p.wei_fwd);
  p.x16.set_data_handle(keep.x.data());
  p.bias.set_data_handle(const_cast<float*>(b.f32()));
  p.y.set_data_handle(y);
  p.fwd.execute(strm,
                {{DNNL_ARG_SRC, p.x16}, {DNNL_ARG_WEIGHTS, p.wei_fwd}, {DNNL_ARG_BIAS, p.bias}, {DNNL_ARG_DST, p.y}});
  strm.wait();
}

// dyt from dy16 (rows x K): each chunk of chunk_rows rows transposed (K x its rows), as convert_dy
// writes it.
void transpose_chunks(const bf16* dy16, int64_t rows, int64_t k, int64_t chunk_rows, bf16* dyt) {
#pragma omp parallel for schedule(static) if (rows * k > 65536 && !omp_in_parallel())
  for (int64_t c0 = 0; c0 < rows; c0 += chunk_rows) {
    const int64_t c_rows = std::min(chunk_rows, rows - c0);
    for (int64_t i = 0; i < c_rows; ++i)
      for (int64_t j = 0; j < k; ++j) dyt[c0 * k + j * c_rows + i] = dy16[(c0 + i) * k + j];
  }
}

// The weight and data gradients from keep.dy (bf16, masked) and, for the product, its transpose dyt.
void run_backward(const Conv2dShape& g, Plan& p, const Tensor& w, Tensor* dx, Tensor& dw, Bf16Buffers& keep,
                  const bf16* dyt);
}  // namespace

void conv2d_forward_bf16(const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                         Bf16Buffers& keep) {
  check(y, Shape{g.n, g.k, g.p, g.q}, Layout::NHWC, "output", g);
  run_forward(g, plan_for(g), x, w, b, y.f32(), keep);
}

void conv2d_forward_bf16_out(const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& b,
                             Bf16Buffers& keep) {
  keep.y.resize(size_t(g.n * g.p * g.q * g.k));
  run_forward(g, plan_for(g, true), x, w, b, keep.y.data(), keep);
}

void conv2d_backward_bf16_from(const Conv2dShape& g, const Tensor& w, Tensor* dx, Tensor& dw, Bf16Buffers& keep) {
  EMBER_CHECK(keep.x.size() == size_t(g.n * g.h * g.w * g.c) && keep.dy.size() == size_t(g.n * g.p * g.q * g.k), Error,
              "conv2d (cpu, bf16): backward before forward, or without the output gradient");
  Plan& p = plan_for(g, true);
  thread_local std::vector<bf16> dyt;
  if (p.product) {
    const int64_t rows = g.n * g.p * g.q;
    dyt.resize(size_t(rows * g.k));
    transpose_chunks(keep.dy.data(), rows, g.k, chunk_images(g) * g.p * g.q, dyt.data());
  }
  run_backward(g, p, w, dx, dw, keep, dyt.data());
}

void conv2d_backward_bf16(const Conv2dShape& g, const Tensor& w, const Tensor& y, const Tensor& dy, Tensor* dx,
                          Tensor& dw, Tensor& db, bool dy_premasked, Bf16Buffers& keep) {
  const Shape ys{g.n, g.k, g.p, g.q};
  check(y, ys, Layout::NHWC, "output", g);
  check(dy, ys, Layout::NHWC, "output gradient", g);
  check(db, Shape{g.k}, Layout::RowMajor, "bias gradient", g);
  EMBER_CHECK(keep.x.size() == size_t(g.n * g.h * g.w * g.c), Error, "conv2d (cpu, bf16): backward before forward");
  Plan& p = plan_for(g);
  const int64_t rows = g.n * g.p * g.q, chunk_rows = chunk_images(g) * g.p * g.q;
  thread_local std::vector<bf16> dyt;
  keep.dy.resize(size_t(rows * g.k));
  if (p.product) dyt.resize(size_t(rows * g.k));
  convert_dy(dy.f32(), g.relu && !dy_premasked ? y.f32() : nullptr, rows, g.k, chunk_rows, keep.dy.data(),
             p.product ? dyt.data() : nullptr, db.f32());
  run_backward(g, p, w, dx, dw, keep, dyt.data());
}

namespace {
// dw by the forward convolution over the batch (make_weight_gradient_forward).
void weight_gradient_forward(const Conv2dShape& g, Plan& p, Tensor& dw, Bf16Buffers& keep) {
  auto& strm = dnnl_stream();
  if (swap_fits(g)) {
    swap_batch_and_channels(g, keep.x.data(), static_cast<bf16*>(p.wg_src.get_data_handle()));
  } else {
    p.wg_x_view.set_data_handle(keep.x.data());
    p.wg_x_to_src.execute(strm, p.wg_x_view, p.wg_src);
  }
  if (p.wg_own_copies) {
    strm.wait();
    dy_to_blocked(g, keep.dy.data(), static_cast<bf16*>(p.wg_wei.get_data_handle()));
  } else {
    p.wg_dy_view.set_data_handle(keep.dy.data());
    p.wg_dy_to_wei.execute(strm, p.wg_dy_view, p.wg_wei);
  }
  p.wg_fwd.execute(strm, {{DNNL_ARG_SRC, p.wg_src}, {DNNL_ARG_WEIGHTS, p.wg_wei}, {DNNL_ARG_DST, p.wg_dst}});
  strm.wait();
  // (C, R, S, K) -> (K, C, R, S)
  float* const out = dw.f32();
  const float* const sums = p.wg_out.data();
#pragma omp parallel for schedule(static) if (g.k * g.c * g.r * g.s > 16384 && !omp_in_parallel())
  for (int64_t k = 0; k < g.k; ++k)
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t r = 0; r < g.r; ++r)
        for (int64_t s = 0; s < g.s; ++s)
          out[((k * g.c + c) * g.r + r) * g.s + s] = sums[((c * g.r + r) * g.s + s) * g.k + k];
}

// dw as a product: (K x rows) dy^T times the (rows x RSC) im2col of x, chunk by chunk, added up in
// fp32; then (K, R, S, C) -> (K, C, R, S).
void weight_gradient_product(const Conv2dShape& g, Tensor& dw, Bf16Buffers& keep, const bf16* dyt) {
  const int64_t rows = g.n * g.p * g.q, width = g.r * g.s * g.c, per = chunk_images(g), chunk_rows = per * g.p * g.q;
  thread_local std::vector<bf16> cols;
  thread_local std::vector<float> wgrad;
  cols.resize(size_t(std::min(rows, chunk_rows) * width));
  wgrad.resize(size_t(g.k * width));
  for (int64_t n0 = 0; n0 < g.n; n0 += per) {
    const int64_t count = std::min(per, g.n - n0);
    im2col(g, keep.x.data(), n0, count, cols.data());
    matmul_bf16(false, false, g.k, width, count * g.p * g.q, dyt + n0 * g.p * g.q * g.k, cols.data(), wgrad.data(),
                nullptr, false, /*accumulate=*/n0 > 0);
  }
  float* const out = dw.f32();
  const float* const sums = wgrad.data();  // the caller's (thread_local: each pool thread has its own)
#pragma omp parallel for schedule(static) if (g.k * width > 16384 && !omp_in_parallel())
  for (int64_t k = 0; k < g.k; ++k)
    for (int64_t r = 0; r < g.r; ++r)
      for (int64_t s = 0; s < g.s; ++s)
        for (int64_t c = 0; c < g.c; ++c)
          out[((k * g.c + c) * g.r + r) * g.s + s] = sums[((k * g.r + r) * g.s + s) * g.c + c];
}

// dx from p.dy16: the forward convolution with the flipped weights, or the backward-data primitive.
void data_gradient(const Conv2dShape& g, Plan& p, const Tensor& w, Tensor& dx) {
  auto& strm = dnnl_stream();
  if (p.dx_forward) {
    // w'[c, k, r, s] = w[k, c, R-1-r, S-1-s] (make_forward_and_data).
    const float* wk = w.f32();
    float* const flip = p.wflip.data();
#pragma omp parallel for schedule(static) if (g.k * g.c * g.r * g.s > 16384 && !omp_in_parallel())
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t k = 0; k < g.k; ++k)
        for (int64_t r = 0; r < g.r; ++r)
          for (int64_t s = 0; s < g.s; ++s)
            flip[((c * g.k + k) * g.r + r) * g.s + s] = wk[((k * g.c + c) * g.r + (g.r - 1 - r)) * g.s + (g.s - 1 - s)];
    p.wei_to_bwd.execute(strm, p.wflip_user, p.wei_bwd);
    p.dx.set_data_handle(dx.f32());
    p.dx_fwd.execute(strm, {{DNNL_ARG_SRC, p.dy16}, {DNNL_ARG_WEIGHTS, p.wei_bwd}, {DNNL_ARG_DST, p.dx}});
  } else {
    p.wei_user.set_data_handle(const_cast<float*>(w.f32()));
    p.wei_to_bwd.execute(strm, p.wei_user, p.wei_bwd);
    p.dx.set_data_handle(dx.f32());
    p.bwd_data.execute(strm, {{DNNL_ARG_DIFF_DST, p.dy16}, {DNNL_ARG_WEIGHTS, p.wei_bwd}, {DNNL_ARG_DIFF_SRC, p.dx}});
  }
  strm.wait();
}

void run_backward(const Conv2dShape& g, Plan& p, const Tensor& w, Tensor* dx, Tensor& dw, Bf16Buffers& keep,
                  const bf16* dyt) {
  if (dx) check(*dx, Shape{g.n, g.c, g.h, g.w}, Layout::NHWC, "input gradient", g);
  check(w, Shape{g.k, g.c, g.r, g.s}, Layout::RowMajor, "weights", g);
  check(dw, w.shape(), Layout::RowMajor, "weight gradient", g);
  p.dy16.set_data_handle(keep.dy.data());
  if (p.wg_forward) {
    weight_gradient_forward(g, p, dw, keep);
  } else if (p.product) {
    weight_gradient_product(g, dw, keep, dyt);
  } else {
    auto& strm = dnnl_stream();
    p.x16.set_data_handle(keep.x.data());
    p.diff_wei_user.set_data_handle(dw.f32());
    if (!p.diff_wei_to_user) p.diff_wei.set_data_handle(dw.f32());
    p.bwd_w.execute(strm, {{DNNL_ARG_SRC, p.x16}, {DNNL_ARG_DIFF_DST, p.dy16}, {DNNL_ARG_DIFF_WEIGHTS, p.diff_wei}});
    if (p.diff_wei_to_user) p.diff_wei_to_user->execute(strm, p.diff_wei, p.diff_wei_user);
    strm.wait();
  }
  if (dx) data_gradient(g, p, w, *dx);
}
}  // namespace

std::string conv2d_bf16_kernel_info(const Conv2dShape& g, bool out16) {
  const Plan& p = plan_for(g, out16);
  const int64_t rows = std::min(g.n, chunk_images(g)) * g.p * g.q;
  const std::string data = p.dx_forward ? std::string("oneDNN forward ") + p.dx_pd.impl_info_str()
                                        : std::string("oneDNN ") + p.bwd_data_pd.impl_info_str();
  const std::string weights =
      p.product      ? "im2col + oneDNN matmul " + matmul_bf16_kernel_info(false, false, g.k, g.r * g.s * g.c, rows)
      : p.wg_forward ? std::string("oneDNN forward over the batch ") + p.wg_pd.impl_info_str()
                     : std::string("oneDNN ") + p.bwd_w_pd.impl_info_str();
  return std::string("fwd oneDNN ") + p.fwd_pd.impl_info_str() + ", bwd-data " + data + ", bwd-weights " + weights +
         " (bf16)";
}

}  // namespace ember::cpu
