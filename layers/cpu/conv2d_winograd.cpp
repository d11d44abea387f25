// Winograd F(4x4, 3x3) weight gradient (see the header). With the forward's matrices (Lavin &
// Gray, points 0, +-1, +-2, inf) y = A^T [(G w G^T) . (B^T d B)] A, the weight gradient of one
// 4x4 tile of dy over its 6x6 tile of x is dw = G^T [(A dy A^T) . (B^T x B)] G: the same
// bilinear form differentiated in w. So, per group of 16 images (below), per chunk of its images
// (72 tiles: 8 images of 11x11 outputs):
//   U[pt][t][c] = (B^T x_t B)[pt]      the 6x6 x tile under dy tile t, per channel
//   V[pt][t][k] = (A dy_t A^T)[pt]     dy tile t (zero beyond the output), per filter
//   M[pt] (+)= V[pt]^T U[pt]           36 small GEMMs (K x C over the chunk's tiles): each product
//                                      summed from zero in float, then written to M in double
//                                      (the group's first chunk) or added to it
// and at the group's end dw[k][c] = G^T M[k][c] G in double, rounded once. db is the sum of V at
// point (1, 1) (A's row 1 is all ones, so that point is the tile's sum), in double. A thread takes
// whole groups where there are at least as many groups as threads; otherwise the threads split
// the 36 points of a group, each transforming every tile for its own points only and summing them.
//
// Over the batch: each group of 16 images (the batch's sum order, core/pairwise_sum.h) has its
// own M from zero, its chunks starting at its first image, and its own G^T M G rounded to float;
// the groups' dw and db are then added as the pairwise tree. A group's bits do not depend on where
// it lies, so a replica's aligned power-of-two share of the groups sums a subtree of the one
// model's tree, and Mirrored/MultiWorker replicas equal one model bit for bit.
//
// Why M is double: G^T M G cancels (M's entries are larger than dw's), so float rounding in M
// shows in dw magnified (measured before the groups: chunks summed across in float made a
// mirrored replica's half batch drift 1e-3 from the whole batch's run within ten Adam steps;
// Adam turns any difference on a near-zero gradient into a step of about lr). Adding into M costs
// K * C adds per point and chunk, 1/72 of the GEMM's, and each group's double G^T M G about 4% of
// the kernel's time at one group. Vectors of 8 channels (GCC vector types, as in
// conv2d_maxpool.cpp); the GEMMs in 16 lanes where the CPU has AVX-512.
#include "conv2d_winograd.h"

#include <omp.h>
#include <unistd.h>

#include <algorithm>

#include "../../core/cpu/cpu_features.h"
#include "../../core/error.h"
#include "../../core/pairwise_sum.h"
#include "simd.h"
#include "winograd_transforms.h"

namespace ember::cpu {

namespace {
using simd::d4;
using simd::d4u;
using simd::d8u;  // two d4s; where a f8 adds into M
using simd::f8;
using simd::f8u;
inline void load(f8& v, const float* p) { v = *reinterpret_cast<const f8u*>(p); }
inline void store(float* p, const f8& v) { *reinterpret_cast<f8u*>(p) = v; }
constexpr int64_t kLanes = 8;
constexpr int64_t kPoints = 36;               // the 6x6 transform domain
constexpr int64_t kChunkTiles = 72;           // tiles per chunk (whole images: more where one image has more):
                                              // U, V of 72 tiles (1 MB at C + K = 96) stay in L2
constexpr int64_t kBlockK = 4, kBlockC = 16;  // accumulate_block's register tile
constexpr int64_t kSumPoint = 1 * 6 + 1;      // V there is the tile's sum of dy

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

// m[k][c] (+)= sum over t of v[t * sv + k] * u[t * su + c], k in [0, 4), c in [0, 16): 8 vector
// accumulators, 2 loads and 4 broadcasts per tile; the sum in float, added to m in double (add) or
// written to it.
void accumulate_block(const float* v, int64_t sv, const float* u, int64_t su, int64_t tiles, double* m, int64_t ldm,
                      bool add) {
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
    for (int64_t h = 0; h < 2; ++h) {
      d8u& to = *reinterpret_cast<d8u*>(m + k * ldm + h * kLanes);
      to = add ? to + __builtin_convertvector(acc[k][h], d8u) : __builtin_convertvector(acc[k][h], d8u);
    }
}

// One point's M (K x C, row stride C) (+)= V^T U over the tiles (in float, added in double or
// written as accumulate_block's), where the CPU has AVX-512
// and C is a multiple of 32: 8 x 32 register tiles of 16 accumulators (of the 32 registers), per tile 2 loads and 8
// broadcasts for 16 fused multiply-adds of 16 lanes, twice accumulate_block's work per instruction. Compiled for
// AVX-512 whatever the build's target; called only after the CPU check.
#if defined(__x86_64__) && defined(__GNUC__)
#define EMBER_WINOGRAD_AVX512 1
EMBER_AVX512 void accumulate_point_avx512(const float* v, const float* u, int64_t tiles, double* m, int64_t k_count,
                                          int64_t c_count, bool add) {
  using simd::d16u;
  using simd::f16;
  using simd::f16u;
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
        for (int64_t h = 0; h < 2; ++h) {
          d16u& to = *reinterpret_cast<d16u*>(m + (k0 + k) * c_count + c0 + h * 16);
          to = add ? to + __builtin_convertvector(acc[k][h], d16u) : __builtin_convertvector(acc[k][h], d16u);
        }
    }
}
#endif

}  // namespace

bool conv2d_winograd_weight_gradient_fits(const Conv2dShape& g) {
  return g.r == 3 && g.s == 3 && g.stride_h == 1 && g.stride_w == 1 && g.c % kBlockC == 0 && g.k % kBlockK == 0 &&
         g.k % kLanes == 0 && g.p >= 4 && g.q >= 4;
}

namespace {
// A core's L2 in bytes (1 MB where the system does not say).
int64_t l2_bytes() {
  static const int64_t bytes = [] {
    const long b = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return b > 0 ? int64_t(b) : int64_t(1) << 20;
  }();
  return bytes;
}

// One call's geometry and buffers.
struct WgradJob {
  const Conv2dShape& g;
  const float* x;
  const float* dy;
  int64_t tw, per_image, chunk_images, kc_count;
  bool avx512;
};

// Points [pt0, pt1)'s sums M (double, M[pt][k][c] at m + pt * kc_count) over the images [first,
// end), in chunks from `first`, and, where kSumPoint is among them, db's sums (double, bias[k]):
// both written (=). u, v: a chunk's transformed tiles for these points, at point strides su, sv
// (point pt at u + (pt - ptu) * su, ptu the first point they hold). The same bits for a point
// whichever thread computes it and with whichever other points.
void accumulate_points(const WgradJob& j, int64_t first, int64_t end, int64_t pt0, int64_t pt1, int64_t ptu, float* u,
                       int64_t su, float* v, int64_t sv, double* m, double* bias) {
  const Conv2dShape& g = j.g;
  for (int64_t n0 = first; n0 < end && pt0 < pt1; n0 += j.chunk_images) {
    const int64_t tiles = std::min(j.chunk_images, end - n0) * j.per_image;
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t n = n0 + t / j.per_image, ty = t % j.per_image / j.tw, tx = t % j.tw;
      const float* xn = j.x + n * g.h * g.w * g.c;
      const float* dyn = j.dy + n * g.p * g.q * g.k;
      for (int64_t c0 = 0; c0 < g.c; c0 += kLanes)
        transform_tile<6, bt6<f8>>(xn, g.h, g.w, g.c, ty * 4 - g.pad_top, tx * 4 - g.pad_left, c0,
                                   u - ptu * su + t * g.c + c0, su, pt0, pt1);
      for (int64_t k0 = 0; k0 < g.k; k0 += kLanes)
        transform_tile<4, a6>(dyn, g.p, g.q, g.k, ty * 4, tx * 4, k0, v - ptu * sv + t * g.k + k0, sv, pt0, pt1);
    }
    for (int64_t pt = pt0; pt < pt1; ++pt) {
      double* const mp = m + pt * j.kc_count;
      const float* vp = v + (pt - ptu) * sv;
      const float* up = u + (pt - ptu) * su;
#ifdef EMBER_WINOGRAD_AVX512
      if (j.avx512) {
        accumulate_point_avx512(vp, up, tiles, mp, g.k, g.c, n0 != first);
      } else
#endif
        for (int64_t k0 = 0; k0 < g.k; k0 += kBlockK)
          for (int64_t c0 = 0; c0 < g.c; c0 += kBlockC)
            accumulate_block(vp + k0, g.k, up + c0, g.c, tiles, mp + k0 * g.c + c0, g.c, n0 != first);
      if (pt == kSumPoint) {  // db: one running sum per filter of one term per tile (not 36 products)
        if (n0 == first) std::fill(bias, bias + g.k, 0.0);
        for (int64_t t = 0; t < tiles; ++t)
          for (int64_t k = 0; k < g.k; ++k) bias[k] += vp[t * g.k + k];
      }
    }
  }
}

// G^T (3x6, dw = G^T M G) = {{1/4, -1/6, -1/6, 1/24, 1/24, 0}, {0, -1/6, 1/6, 1/12, -1/12, 0},
// {0, -1/6, -1/6, 1/6, 1/6, 1}} applied to 6 values, with a = m1 + m2, b = m1 - m2, c = m3 + m4, d = m3 - m4:
// o0 = m0 / 4 - a / 6 + c / 24, o1 = d / 12 - b / 6, o2 = (c - a) / 6 + m5 (its rows, factored:
// 11 operations instead of 14 multiply-adds, no zero terms).
inline void gt6(const d4 (&m)[6], d4 (&o)[3]) {
  const d4 a = m[1] + m[2], b = m[1] - m[2], c = m[3] + m[4], d = m[3] - m[4];
  o[0] = m[0] * 0.25 - a * (1.0 / 6) + c * (1.0 / 24);
  o[1] = d * (1.0 / 12) - b * (1.0 / 6);
  o[2] = (c - a) * (1.0 / 6) + m[5];
}

// dw[k][c] = G^T M[k][c] G for the pairs [kc0, kc1) (multiples of 4), four pairs per vector, in
// double, rounded once to float into dw (K, C, 3, 3).
void finish_pairs(const double* m, int64_t kc_count, int64_t kc0, int64_t kc1, float* dw) {
  for (int64_t kc = kc0; kc < kc1; kc += 4) {
    d4 gm[3][6];  // G^T M: column j of M's 6x6 points, transformed
    for (int64_t j = 0; j < 6; ++j) {
      d4 col[6], o[3];
      for (int64_t i = 0; i < 6; ++i) col[i] = *reinterpret_cast<const d4u*>(m + (i * 6 + j) * kc_count + kc);
      gt6(col, o);
      for (int64_t r = 0; r < 3; ++r) gm[r][j] = o[r];
    }
    for (int64_t r = 0; r < 3; ++r) {
      d4 o[3];
      gt6(gm[r], o);
      for (int64_t s = 0; s < 3; ++s)
        for (int64_t l = 0; l < 4; ++l) dw[(kc + l) * 9 + r * 3 + s] = float(o[s][l]);
    }
  }
}
}  // namespace

void conv2d_winograd_weight_gradient(const Conv2dShape& g, const float* x, const float* dy, float* dw, float* db,
                                     WinogradScratch& scratch, bool allow_avx512) {
  EMBER_CHECK(conv2d_winograd_weight_gradient_fits(g), ArgumentError,
              "conv2d (cpu): no Winograd weight gradient for " + g.str());
  const int64_t th = (g.p + 3) / 4, tw = (g.q + 3) / 4, per_image = th * tw;
  const int64_t chunk_images = std::max<int64_t>(1, kChunkTiles / per_image), chunk_tiles = chunk_images * per_image;
  const int64_t kc_count = g.k * g.c, m_size = kPoints * kc_count;
#ifdef EMBER_WINOGRAD_AVX512
  const bool avx512 = allow_avx512 && g.c % 32 == 0 && g.k % 8 == 0 && cpu_avx512();
#else
  const bool avx512 = false;
  (void)allow_avx512;
#endif
  const WgradJob job{g, x, dy, tw, per_image, chunk_images, kc_count, avx512};
  // Each group of the batch (core/pairwise_sum.h) on its own: with at least as many groups as
  // threads, each thread takes whole groups (its own M, no barrier, G^T M G on its own cache's
  // M), the rounds of groups that fill every thread; the remaining groups (groups mod threads:
  // all of them when there are fewer groups than threads) are split by points between the
  // threads, as below. Each group's dw and db go to a part (one
  // group: to dw and db directly), the parts then added as the pairwise tree.
  const int64_t groups = batch_groups(g.n), nt = omp_get_max_threads();
  if (groups == 0) {  // an empty batch: no terms
    std::fill(dw, dw + kc_count * 9, 0.0f);
    std::fill(db, db + g.k, 0.0f);
    return;
  }
  const int64_t whole = groups / nt * nt;  // groups taken whole by one thread
  const int64_t part = kc_count * 9 + g.k;
  // A thread's own group runs its points in passes whose tiles (U, V) fill at most half of a
  // core's L2 (conv2d_1's chunk of 72 tiles at C + K = 96 is 1 MB for all 36 points: one pass with
  // 2 MB of L2, 2-4 passes with 0.5-1 MB). Each pass repeats the transforms' first axis, as the
  // point-split threads below do; the passes change no sum.
  const int64_t point_bytes = chunk_tiles * (g.c + g.k) * int64_t(sizeof(float));
  const int64_t pass_points = std::clamp<int64_t>(l2_bytes() / 2 / std::max<int64_t>(point_bytes, 1), 1, kPoints);
  // U[pt][t][c], V[pt][t][k]: a point's tiles contiguous for the GEMMs; the points' strides padded
  // by a cache line so that the transforms' 36 stores per tile do not alias in L1.
  const int64_t su = chunk_tiles * g.c + 16, sv = chunk_tiles * g.k + 16;
  const int64_t shared_tiles = kPoints * (su + sv), own_tiles = pass_points * (su + sv);
  const int64_t own_threads = whole > 0 ? nt : 0;
  scratch.tiles.resize(size_t(shared_tiles + own_threads * own_tiles + (groups > 1 ? groups * part : 0)));
  scratch.sums.resize(size_t((1 + own_threads) * (m_size + g.k)));
  float* const tiles = scratch.tiles.data();
  float* const parts = tiles + shared_tiles + own_threads * own_tiles;
  double* const sums = scratch.sums.data();
  const auto group_dw = [&](int64_t j) { return groups > 1 ? parts + j * part : dw; };
  const auto group_db = [&](int64_t j) { return groups > 1 ? parts + j * part + kc_count * 9 : db; };

#pragma omp parallel
  {
    const int64_t tid = omp_get_thread_num(), team = omp_get_num_threads();
    // Whole groups: this thread's, in passes of points.
    if (whole > 0) {
      float* const u = tiles + shared_tiles + tid * own_tiles;
      float* const v = u + pass_points * su;
      double* const m = sums + (1 + tid) * (m_size + g.k);
      for (int64_t j = tid; j < whole; j += team) {
        const int64_t first = j * kBatchGroupRows, end = std::min(g.n, first + kBatchGroupRows);
        for (int64_t p0 = 0; p0 < kPoints; p0 += pass_points) {
          const int64_t p1 = std::min(kPoints, p0 + pass_points);
          accumulate_points(job, first, end, p0, p1, p0, u, su, v, sv, m, m + m_size);
        }
        finish_pairs(m, kc_count, 0, kc_count, group_dw(j));
        for (int64_t k = 0; k < g.k; ++k) group_db(j)[k] = float(m[m_size + k]);
      }
    }
    // The other groups: each thread owns the points [pt0, pt1) of the 36: it transforms every tile,
    // but only for its points, and sums them. Nothing a thread writes is read by another until G^T
    // M G: no barrier per chunk and no transformed tile crossing cores (measured: 0.94 -> 0.79 ms
    // at batch 64 on 2 cores against splitting tiles for the transforms and points for the GEMMs;
    // docs/benchmarks.md). The cost: every thread does the first axis of every tile's transform
    // (so a thread's share of the transforms stops shrinking beyond 2-3 threads; only 2 were
    // measured), and beyond 36 threads some idle. Computing only a thread's rows along the first
    // axis (a switch per row) ran slower on 2 cores: 0.79 -> 0.93 ms.
    const int64_t pt0 = kPoints * tid / team, pt1 = kPoints * (tid + 1) / team;
    for (int64_t j = whole; j < groups; ++j) {
      const int64_t first = j * kBatchGroupRows, end = std::min(g.n, first + kBatchGroupRows);
      accumulate_points(job, first, end, pt0, pt1, 0, tiles, su, tiles + kPoints * su, sv, sums, sums + m_size);
      if (pt0 <= kSumPoint && kSumPoint < pt1)
        for (int64_t k = 0; k < g.k; ++k) group_db(j)[k] = float(sums[m_size + k]);
#pragma omp barrier
          // G^T M G in the same parallel region (a second one cost more than this loop); the loop's
          // closing barrier keeps M until every pair is done.
#pragma omp for schedule(static)
      for (int64_t kc = 0; kc < kc_count; kc += 4) finish_pairs(sums, kc_count, kc, kc + 4, group_dw(j));
    }
    if (groups > 1) {
#pragma omp barrier
#pragma omp for schedule(static)
      for (int64_t e0 = 0; e0 < part; e0 += 1024)
        pairwise_reduce_range(parts, groups, part, e0, std::min(part, e0 + 1024));
    }
  }
  if (groups > 1) {
    std::copy_n(parts, kc_count * 9, dw);
    std::copy_n(parts + kc_count * 9, g.k, db);
  }
}

}  // namespace ember::cpu
