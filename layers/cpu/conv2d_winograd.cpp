// Winograd F(4x4, 3x3) weight gradient (see the header). With the forward's matrices (Lavin &
// Gray, points 0, +-1, +-2, inf) y = A^T [(G w G^T) . (B^T d B)] A, the weight gradient of one
// 4x4 tile of dy over its 6x6 tile of x is dw = G^T [(A dy A^T) . (B^T x B)] G: the same
// bilinear form differentiated in w. So, per chunk of images (72 tiles: 8 images of 11x11 outputs):
//   U[pt][t][c] = (B^T x_t B)[pt]      the 6x6 x tile under dy tile t, per channel
//   V[pt][t][k] = (A dy_t A^T)[pt]     dy tile t (zero beyond the output), per filter
//   M[pt] += V[pt]^T U[pt]             36 small GEMMs (K x C over the chunk's tiles): each product
//                                      summed from zero in float, then added to M in double
// and at the end dw[k][c] = G^T M[k][c] G in double, rounded once. db is the sum of V at point
// (1, 1) (A's row 1 is all ones, so that point is the tile's sum), in double. The threads split
// the 36 points: each transforms every tile for its own points only and sums them.
//
// Why M is double: G^T M G cancels (M's entries are larger than dw's), so float rounding in M
// shows in dw magnified. Summed across chunks in float, a mirrored replica's half batch (its own
// chunks, then the all-reduce) drifted from the whole batch's run by 1e-3 within ten Adam steps
// (Adam turns any difference on a near-zero gradient into a step of about lr). With chunks of
// whole images summed in double, a batch's sums are its shares' added up to dw's last rounding,
// as with the direct sum, when every share is a whole number of chunks (multiples of 8 images
// for conv2d_1: replicas of 16 or 32, micro-batches of 64). Other shares round their partial
// chunks differently, as any reordered float sum does. Adding into M costs K * C adds per point and chunk, 1/72 of the
// GEMM's, and the double G^T M G about 4% of the kernel's time (a float one about nothing). Vectors of 8 channels (GCC
// vector types, as in conv2d_maxpool.cpp); the GEMMs in 16 lanes where the CPU has AVX-512.
#include "conv2d_winograd.h"

#include <omp.h>

#include <algorithm>

#include "../../core/error.h"

namespace ember::cpu {

namespace {
typedef float f8 __attribute__((vector_size(32)));  // local values only, never passed by value (-Wpsabi)
// The same vector at any float's address: loads and stores through it are single unaligned vector
// moves (a 32-byte __builtin_memcpy became two 16-byte moves through the stack, whose reload as one
// vector stalls on store forwarding).
typedef float f8u __attribute__((vector_size(32), aligned(4)));
typedef double d4 __attribute__((vector_size(32)));
typedef double d4u __attribute__((vector_size(32), aligned(8)));
typedef double d8u __attribute__((vector_size(64), aligned(8)));  // two d4s; where a f8 adds into M
inline void load(f8& v, const float* p) { v = *reinterpret_cast<const f8u*>(p); }
inline void store(float* p, const f8& v) { *reinterpret_cast<f8u*>(p) = v; }
constexpr int64_t kLanes = 8;
constexpr int64_t kPoints = 36;               // the 6x6 transform domain
constexpr int64_t kChunkTiles = 72;           // tiles per chunk (whole images: more where one image has more):
                                              // U, V of 72 tiles (1 MB at C + K = 96) stay in L2
constexpr int64_t kBlockK = 4, kBlockC = 16;  // accumulate_block's register tile
constexpr int64_t kSumPoint = 1 * 6 + 1;      // V there is the tile's sum of dy

// out = B^T in along one axis (6 -> 6).
inline void bt6(const f8 (&d)[6], f8 (&o)[6]) {
  o[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
  o[1] = -4.0f * (d[1] + d[2]) + d[3] + d[4];
  o[2] = 4.0f * (d[1] - d[2]) - d[3] + d[4];
  o[3] = 2.0f * (d[3] - d[1]) - d[2] + d[4];
  o[4] = 2.0f * (d[1] - d[3]) - d[2] + d[4];
  o[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
}

// out = A in along one axis (4 -> 6).
inline void a6(const f8 (&g)[4], f8 (&o)[6]) {
  const f8 even = g[0] + g[2], odd = g[1] + g[3];
  const f8 even4 = g[0] + 4.0f * g[2], odd2 = 2.0f * g[1] + 8.0f * g[3];
  o[0] = g[0];
  o[1] = even + odd;
  o[2] = even - odd;
  o[3] = even4 + odd2;
  o[4] = even4 - odd2;
  o[5] = g[3];
}

// The kIn x kIn tile with top-left corner (y0, x0) of an (h, w, c) image, channels [c0, c0 + 8)
// (zeros outside the image), transformed by Axis along both axes, and its points [pt0, pt1) of the
// 36 stored at out[pt * point_stride]: x's 6x6 tiles by B^T, dy's 4x4 tiles by A. The first axis
// is transformed whole; the second only for the rows holding those points.
template <int kIn, void (*Axis)(const f8 (&)[kIn], f8 (&)[6])>
void transform_tile(const float* img, int64_t h, int64_t w, int64_t c, int64_t y0, int64_t x0, int64_t c0, float* out,
                    int64_t point_stride, int64_t pt0, int64_t pt1) {
  f8 t[6][kIn];
  for (int64_t j = 0; j < kIn; ++j) {
    f8 col[kIn];
    const int64_t xx = x0 + j;
    for (int64_t i = 0; i < kIn; ++i) {
      const int64_t yy = y0 + i;
      if (yy >= 0 && yy < h && xx >= 0 && xx < w)
        load(col[i], img + (yy * w + xx) * c + c0);
      else
        col[i] = f8{};
    }
    f8 o[6];
    Axis(col, o);
    for (int64_t i = 0; i < 6; ++i) t[i][j] = o[i];
  }
  for (int64_t i = pt0 / 6; i < (pt1 + 5) / 6; ++i) {
    f8 o[6];
    Axis(t[i], o);
    for (int64_t j = std::max<int64_t>(0, pt0 - i * 6); j < std::min<int64_t>(6, pt1 - i * 6); ++j)
      store(out + (i * 6 + j) * point_stride, o[j]);
  }
}

// m[k][c] += sum over t of v[t * sv + k] * u[t * su + c], k in [0, 4), c in [0, 16): 8 vector
// accumulators, 2 loads and 4 broadcasts per tile; the sum in float, added to m in double.
void accumulate_block(const float* v, int64_t sv, const float* u, int64_t su, int64_t tiles, double* m, int64_t ldm) {
  f8 acc[kBlockK][2];
  for (int64_t k = 0; k < kBlockK; ++k)
    for (int64_t h = 0; h < 2; ++h) acc[k][h] = f8{};
  for (int64_t t = 0; t < tiles; ++t) {
    f8 u0, u1;
    load(u0, u + t * su);
    load(u1, u + t * su + kLanes);
    const float* vt = v + t * sv;
    for (int64_t k = 0; k < kBlockK; ++k) {
      acc[k][0] += vt[k] * u0;
      acc[k][1] += vt[k] * u1;
    }
  }
  for (int64_t k = 0; k < kBlockK; ++k)
    for (int64_t h = 0; h < 2; ++h)
      *reinterpret_cast<d8u*>(m + k * ldm + h * kLanes) += __builtin_convertvector(acc[k][h], d8u);
}

// One point's M (K x C, row stride C) += V^T U over the tiles (in float, added in double), where the CPU has AVX-512
// and C is a multiple of 32: 8 x 32 register tiles of 16 accumulators (of the 32 registers), per tile 2 loads and 8
// broadcasts for 16 fused multiply-adds of 16 lanes, twice accumulate_block's work per instruction. Compiled for
// AVX-512 whatever the build's target; called only after the CPU check.
#if defined(__x86_64__) && defined(__GNUC__)
#define EMBER_WINOGRAD_AVX512 1
__attribute__((target("avx512f"))) void accumulate_point_avx512(const float* v, const float* u, int64_t tiles,
                                                                double* m, int64_t k_count, int64_t c_count) {
  typedef float f16 __attribute__((vector_size(64)));
  typedef float f16u __attribute__((vector_size(64), aligned(4)));
  typedef double d16u __attribute__((vector_size(128), aligned(8)));
  constexpr int64_t kRows = 8;
  for (int64_t k0 = 0; k0 < k_count; k0 += kRows)
    for (int64_t c0 = 0; c0 < c_count; c0 += 32) {
      f16 acc[kRows][2];
      for (int64_t k = 0; k < kRows; ++k)
        for (int64_t h = 0; h < 2; ++h) acc[k][h] = f16{};
      for (int64_t t = 0; t < tiles; ++t) {
        const f16 u0 = *reinterpret_cast<const f16u*>(u + t * c_count + c0);
        const f16 u1 = *reinterpret_cast<const f16u*>(u + t * c_count + c0 + 16);
        const float* vt = v + t * k_count + k0;
#pragma GCC unroll 8  // the accumulators stay in registers at -O2 too
        for (int64_t k = 0; k < kRows; ++k) {
          acc[k][0] += vt[k] * u0;
          acc[k][1] += vt[k] * u1;
        }
      }
      for (int64_t k = 0; k < kRows; ++k)
        for (int64_t h = 0; h < 2; ++h)
          *reinterpret_cast<d16u*>(m + (k0 + k) * c_count + c0 + h * 16) += __builtin_convertvector(acc[k][h], d16u);
    }
}
#endif

// G^T (3x6): dw = G^T M G.
constexpr double kGt[3][6] = {{1.0 / 4, -1.0 / 6, -1.0 / 6, 1.0 / 24, 1.0 / 24, 0.0},
                              {0.0, -1.0 / 6, 1.0 / 6, 1.0 / 12, -1.0 / 12, 0.0},
                              {0.0, -1.0 / 6, -1.0 / 6, 1.0 / 6, 1.0 / 6, 1.0}};
}  // namespace

bool conv2d_winograd_weight_gradient_fits(const Conv2dShape& g) {
  return g.r == 3 && g.s == 3 && g.stride_h == 1 && g.stride_w == 1 && g.c % kBlockC == 0 && g.k % kBlockK == 0 &&
         g.k % kLanes == 0 && g.p >= 4 && g.q >= 4;
}

void conv2d_winograd_weight_gradient(const Conv2dShape& g, const float* x, const float* dy, float* dw, float* db,
                                     WinogradScratch& scratch, bool allow_avx512) {
  EMBER_CHECK(conv2d_winograd_weight_gradient_fits(g), ArgumentError,
              "conv2d (cpu): no Winograd weight gradient for " + g.str());
  const int64_t th = (g.p + 3) / 4, tw = (g.q + 3) / 4, per_image = th * tw;
  const int64_t chunk_images = std::max<int64_t>(1, kChunkTiles / per_image);
  // U[pt][t][c], V[pt][t][k]: a point's tiles contiguous for accumulate_block; the points' strides
  // padded by a cache line so that the transforms' 36 stores per tile do not alias in L1.
  const int64_t su = chunk_images * per_image * g.c + 16, sv = chunk_images * per_image * g.k + 16;
  const int64_t u_size = kPoints * su, v_size = kPoints * sv, kc_count = g.k * g.c, m_size = kPoints * kc_count;
  scratch.tiles.resize(size_t(u_size + v_size));
  float* const u = scratch.tiles.data();
  float* const v = u + u_size;
  scratch.sums.resize(size_t(m_size + g.k));
  double* const m = scratch.sums.data();
  double* const bias = m + m_size;
#ifdef EMBER_WINOGRAD_AVX512
  const bool avx512 = allow_avx512 && g.c % 32 == 0 && g.k % 8 == 0 && __builtin_cpu_supports("avx512f");
#else
  (void)allow_avx512;
#endif

  std::fill(bias, bias + g.k, 0.0);
#pragma omp parallel
  {
    // Each thread owns the points [pt0, pt1) of the 36: it transforms every tile, but only for its
    // points, and sums them (each point's tiles in order, so the same bits at any thread count).
    // Nothing a thread writes is read by another until G^T M G: no barrier per chunk and no
    // transformed tile crossing cores (measured: 0.94 -> 0.79 ms at batch 64 on 2 cores against
    // splitting tiles for the transforms and points for the GEMMs; docs/benchmarks.md). The cost:
    // every thread does the first axis of every tile's transform (so a thread's share of the
    // transforms stops shrinking beyond 2-3 threads; only 2 were measured), and beyond 36 threads
    // some idle. Computing only a thread's rows along the first axis (a switch per row) ran slower
    // on 2 cores: 0.79 -> 0.93 ms.
    const int64_t tid = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t pt0 = kPoints * tid / nt, pt1 = kPoints * (tid + 1) / nt;
    std::fill(m + pt0 * kc_count, m + pt1 * kc_count, 0.0);
    for (int64_t n0 = 0; n0 < g.n && pt0 < pt1; n0 += chunk_images) {
      const int64_t tiles = std::min(chunk_images, g.n - n0) * per_image;
      for (int64_t t = 0; t < tiles; ++t) {
        const int64_t n = n0 + t / per_image, ty = t % per_image / tw, tx = t % tw;
        const float* xn = x + n * g.h * g.w * g.c;
        const float* dyn = dy + n * g.p * g.q * g.k;
        for (int64_t c0 = 0; c0 < g.c; c0 += kLanes)
          transform_tile<6, bt6>(xn, g.h, g.w, g.c, ty * 4 - g.pad_top, tx * 4 - g.pad_left, c0, u + t * g.c + c0, su,
                                 pt0, pt1);
        for (int64_t k0 = 0; k0 < g.k; k0 += kLanes)
          transform_tile<4, a6>(dyn, g.p, g.q, g.k, ty * 4, tx * 4, k0, v + t * g.k + k0, sv, pt0, pt1);
      }
      for (int64_t pt = pt0; pt < pt1; ++pt) {
        double* const mp = m + pt * kc_count;
#ifdef EMBER_WINOGRAD_AVX512
        if (avx512) {
          accumulate_point_avx512(v + pt * sv, u + pt * su, tiles, mp, g.k, g.c);
        } else
#endif
          for (int64_t k0 = 0; k0 < g.k; k0 += kBlockK)
            for (int64_t c0 = 0; c0 < g.c; c0 += kBlockC)
              accumulate_block(v + pt * sv + k0, g.k, u + pt * su + c0, g.c, tiles, mp + k0 * g.c + c0, g.c);
        if (pt == kSumPoint)  // db: one running sum per filter of one term per tile (not 36 products)
          for (int64_t t = 0; t < tiles; ++t)
            for (int64_t k = 0; k < g.k; ++k) bias[k] += v[kSumPoint * sv + t * g.k + k];
      }
    }
#pragma omp barrier

    // dw[k][c] = G^T M[k][c] G, four (k, c) pairs per vector (K * C is a multiple of 128), in the
    // same parallel region (a second one cost more than this loop).
#pragma omp for schedule(static)
    for (int64_t kc0 = 0; kc0 < kc_count; kc0 += 4) {
      d4 gm[3][6];  // G^T M
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t j = 0; j < 6; ++j) {
          d4 sum = d4{};
          for (int64_t i = 0; i < 6; ++i)
            if (kGt[r][i] != 0.0) sum += kGt[r][i] * *reinterpret_cast<const d4u*>(m + (i * 6 + j) * kc_count + kc0);
          gm[r][j] = sum;
        }
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t s = 0; s < 3; ++s) {
          d4 sum = d4{};
          for (int64_t j = 0; j < 6; ++j)
            if (kGt[s][j] != 0.0) sum += gm[r][j] * kGt[s][j];
          for (int64_t l = 0; l < 4; ++l) dw[(kc0 + l) * 9 + r * 3 + s] = float(sum[l]);
        }
    }
  }
  for (int64_t k = 0; k < g.k; ++k) db[k] = float(bias[k]);
}

}  // namespace ember::cpu
