// Winograd F(4x4, 3x3) forward and backward-data (see conv2d_winograd.h). Both are one
// convolution: out[n][p][q][o] = sum over r, s < 3 and i of in[n][p + oy + r][q + ox + s][i] *
// f[r][s][i][o] (zeros outside in), with, for the forward, in = x, out = y, oy = -pad,
// f[r][s][c][k] = w[k][c][r][s] (plus bias and ReLU), and for the backward-data in = dy, out = dx,
// oy = pad - 2, f[r][s][k][c] = w[k][c][2 - r][2 - s] (the flipped kernel, filters and channels
// swapped). With Lavin & Gray's matrices, one 4x4 tile of out is A^T [(G f G^T) . (B^T d B)] A over
// the 6x6 tile d of in under it, so per group of kGroupTiles tiles (across images):
//   V[pt][t][i] = (B^T d_t B)[pt]     each tile's 6x6 input transformed, per channel
//   Y[pt] = V[pt] U[pt]                 36 GEMMs (tiles x in-channels x out-channels), U[pt][i][o] =
//                                       (G f_io G^T)[pt], transformed once per call
//   out tile t = A^T Y[.][t] A         (+ bias, ReLU), written where inside out
// The threads split the groups. Each output is computed from its own tile's row of V alone, in
// the same order wherever that row sits in its group, so the same bits at any thread count and
// for any share of the batch.
// Structural zeros stay exact: the transforms spread every input of a tile over all 16 outputs,
// so an output whose 3x3 window of in is entirely zero would come out as rounding residue of its
// neighbours' values (+-1e-9 on MNIST's background), which ReLU and max-pool then treat as a real
// value. While a tile is read, a mask of its non-zero positions (an OR over channels) is kept;
// such an output is written as the direct sum gives it: exactly the bias (then ReLU), or 0.
// AVX-512 only (16 channels per vector, one cache line per store): fits() says no without it, and
// conv2d.cpp falls back to oneDNN. Every function that touches a vector is compiled for AVX-512
// (the target attribute) whatever the build's target, and runs only after the CPU check.
#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "../../core/cpu/cpu_features.h"
#include "../../core/error.h"
#include "conv2d_winograd.h"
#include "simd.h"
#include "winograd_transforms.h"
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>  // the AVX-512 compare of the structural-zero mask
#endif

namespace ember::cpu {

namespace {
#if defined(__x86_64__) && defined(__GNUC__)
#define EMBER_WINOGRAD_DATA 1
using simd::f16;
using simd::f16u;
constexpr int64_t kLanes = 16;
constexpr int64_t kPoints = 36;
// Tiles per group, taken across image boundaries (each tile's output depends on its own row
// alone): a multiple of both register blocks' rows (6 and 8); its V and Y (36 x 24 x (C + K)
// floats: 330 KB at C + K = 96) and U (36 x C x K: 295 KB) stay in L2.
constexpr int64_t kGroupTiles = 24;

struct Conv {
  int64_t n, ih, iw, ic, oh, ow, oc, oy, ox;
  int64_t th, tw;  // tiles per image down and across
};

EMBER_AVX512_INLINE void load(f16& v, const float* p) { v = *reinterpret_cast<const f16u*>(p); }
EMBER_AVX512_INLINE void store(float* p, const f16& v) { *reinterpret_cast<f16u*>(p) = v; }

// o = A^T m along one axis (6 -> 4).
EMBER_AVX512_INLINE void at4(const f16 (&m)[6], f16 (&o)[4]) {
  const f16 s12 = m[1] + m[2], d12 = m[1] - m[2], s34 = m[3] + m[4], d34 = m[3] - m[4];
  o[0] = m[0] + s12 + s34;
  o[1] = d12 + 2.0f * d34;
  o[2] = s12 + 4.0f * s34;
  o[3] = d12 + 8.0f * d34 + m[5];
}

// o = G f along one axis (3 -> 6).
EMBER_AVX512_INLINE void g6(const f16 (&f)[3], f16 (&o)[6]) {
  const f16 even = f[0] + f[2];
  o[0] = 0.25f * f[0];
  o[1] = (-1.0f / 6) * (even + f[1]);
  o[2] = (-1.0f / 6) * (even - f[1]);
  o[3] = (1.0f / 24) * f[0] + (1.0f / 12) * f[1] + (1.0f / 6) * f[2];
  o[4] = (1.0f / 24) * f[0] - (1.0f / 12) * f[1] + (1.0f / 6) * f[2];
  o[5] = f[2];
}

// U[pt][i][o] for in-channel i: f (9 taps x oc, tap-major) transformed, 16 out-channels at a time.
EMBER_AVX512 void transform_filters(const float* f, int64_t oc, float* u, int64_t point_stride) {
  for (int64_t o0 = 0; o0 < oc; o0 += kLanes) {
    f16 t[6][3];
    for (int64_t s = 0; s < 3; ++s) {
      f16 col[3], o[6];
      for (int64_t r = 0; r < 3; ++r) load(col[r], f + (r * 3 + s) * oc + o0);
      g6(col, o);
      for (int64_t i = 0; i < 6; ++i) t[i][s] = o[i];
    }
    for (int64_t i = 0; i < 6; ++i) {
      f16 o[6];
      g6(t[i], o);
      for (int64_t j = 0; j < 6; ++j) store(u + (i * 6 + j) * point_stride + o0, o[j]);
    }
  }
}

// The 6x6 tile at (y0, x0) of image img (ih x iw x ic; zeros outside), channels [c0, c0 + 16),
// by B^T both ways, to out[pt * point_stride]. Sets bit 6 i + j of nonzero where position (i, j)
// holds a value other than +-0 in one of these channels (NaN included).
EMBER_AVX512_INLINE void input_tile(const Conv& g, const float* img, int64_t y0, int64_t x0, int64_t c0, float* out,
                                    int64_t point_stride, uint64_t& nonzero) {
  const bool inside = y0 >= 0 && x0 >= 0 && y0 + 6 <= g.ih && x0 + 6 <= g.iw;
  f16 t[6][6];
  for (int64_t i = 0; i < 6; ++i) {
    f16 row[6], o[6];
    const int64_t yy = y0 + i;
    for (int64_t j = 0; j < 6; ++j) {
      const int64_t xx = x0 + j;
      if (inside || (yy >= 0 && yy < g.ih && xx >= 0 && xx < g.iw)) {
        load(row[j], img + (yy * g.iw + xx) * g.ic + c0);
        const bool any = _mm512_cmp_ps_mask(__m512(row[j]), _mm512_setzero_ps(), _CMP_NEQ_UQ) != 0;
        nonzero |= uint64_t(any) << (i * 6 + j);
      } else {
        row[j] = f16{};
      }
    }
    bt6(row, o);
    for (int64_t j = 0; j < 6; ++j) t[j][i] = o[j];
  }
  for (int64_t j = 0; j < 6; ++j) {
    f16 o[6];
    bt6(t[j], o);
    for (int64_t i = 0; i < 6; ++i) store(out + (i * 6 + j) * point_stride, o[i]);
  }
}

// From a tile's 6x6 non-zero mask (bit 6 i + j), its 4x4 outputs with a non-zero input under
// their 3x3 window (bit 4 a + b for output (a, b)): the others are structural zeros.
inline uint32_t live_outputs(uint64_t nonzero) {
  uint32_t across[6];  // per input row i: bit b where one of its columns b..b+2 is non-zero
  for (int i = 0; i < 6; ++i) {
    const uint32_t row = uint32_t(nonzero >> (6 * i)) & 0x3f;
    across[i] = (row | row >> 1 | row >> 2) & 0xf;
  }
  uint32_t live = 0;
  for (int a = 0; a < 4; ++a) live |= (across[a] | across[a + 1] | across[a + 2]) << (4 * a);
  return live;
}

// y[pt * point_stride] (one tile, out-channels [o0, o0 + 16)) by A^T both ways, plus bias, ReLU,
// to the 4x4 outputs at (p0, q0) of image img (oh x ow x oc) that are inside it; those whose bit
// in live is clear (structural zeros) get the bias alone, as the direct sum gives them.
EMBER_AVX512_INLINE void output_tile(const Conv& g, const float* y, int64_t point_stride, const f16& bias, bool relu,
                                     uint32_t live, float* img, int64_t p0, int64_t q0, int64_t o0) {
  f16 t[4][6];
  for (int64_t j = 0; j < 6; ++j) {
    f16 col[6], o[4];
    for (int64_t i = 0; i < 6; ++i) load(col[i], y + (i * 6 + j) * point_stride);
    at4(col, o);
    for (int64_t i = 0; i < 4; ++i) t[i][j] = o[i];
  }
  for (int64_t i = 0; i < 4 && p0 + i < g.oh; ++i) {
    f16 o[4];
    at4(t[i], o);
    for (int64_t j = 0; j < 4 && q0 + j < g.ow; ++j) {
      f16 v = ((live >> (4 * i + j)) & 1) ? o[j] + bias : bias;
      if (relu) v = v > 0.0f ? v : f16{};
      store(img + ((p0 + i) * g.ow + q0 + j) * g.oc + o0, v);
    }
  }
}

// y (kRows x 16 kVecs, row stride oc) = v (kRows x ic, row stride ic) u (ic x 16 kVecs, row
// stride oc): kRows * kVecs accumulators, per in-channel kVecs loads and kRows broadcasts.
template <int kRows, int kVecs>
EMBER_AVX512 void gemm_block(const float* v, int64_t ic, const float* u, int64_t oc, float* y) {
  f16 acc[kRows][kVecs];
  for (int r = 0; r < kRows; ++r)
    for (int h = 0; h < kVecs; ++h) acc[r][h] = f16{};
  for (int64_t i = 0; i < ic; ++i) {
    f16 b[kVecs];
    for (int h = 0; h < kVecs; ++h) load(b[h], u + i * oc + h * kLanes);
    for (int r = 0; r < kRows; ++r) {
      const float a = v[r * ic + i];
      for (int h = 0; h < kVecs; ++h) acc[r][h] += a * b[h];
    }
  }
  for (int r = 0; r < kRows; ++r)
    for (int h = 0; h < kVecs; ++h) store(y + r * oc + h * kLanes, acc[r][h]);
}

// One point's Y (rows x oc) = V (rows x ic) U (ic x oc), rows a multiple of the block's.
template <int kRows, int kVecs>
EMBER_AVX512 void gemm_point(const float* v, int64_t rows, int64_t ic, const float* u, int64_t oc, float* y) {
  for (int64_t r0 = 0; r0 < rows; r0 += kRows)
    for (int64_t o0 = 0; o0 < oc; o0 += kVecs * kLanes)
      gemm_block<kRows, kVecs>(v + r0 * ic, ic, u + o0, oc, y + r0 * oc + o0);
}

// The register block: 4 vectors of out-channels by 6 tiles (24 accumulators) where oc allows,
// else 2 by 8 or 1 by 8.
int64_t block_rows(int64_t oc) { return oc % 64 == 0 ? 6 : 8; }

// in-channel i's 9 taps (oc floats each) from w (K, C, 3, 3): f[r][s][c][k] = w[k][c][r][s] for the
// forward, f[r][s][k][c] = w[k][c][2 - r][2 - s] for the backward-data; then transformed into U.
EMBER_AVX512 void filters_of_channel(const float* w, int64_t i, int64_t ic, int64_t oc, bool backward_data, float* taps,
                                     float* u, int64_t su) {
  for (int64_t o = 0; o < oc; ++o) {
    const float* wio = w + (backward_data ? i * oc + o : o * ic + i) * 9;
    for (int64_t t = 0; t < 9; ++t) taps[(backward_data ? 8 - t : t) * oc + o] = wio[t];
  }
  transform_filters(taps, oc, u + i * oc, su);
}

// Tiles [t0, t0 + tiles) of the batch (counted image by image, row by row): input transforms into
// v, the 36 GEMMs into y, output transforms into out.
EMBER_AVX512 void run_group(const Conv& g, const float* in, const float* u, int64_t su, const float* bias, bool relu,
                            float* out, int64_t t0, int64_t tiles, float* v, int64_t sv, float* y, int64_t sy) {
  const int64_t per_image = g.th * g.tw, rows_per_block = block_rows(g.oc);
  const int64_t rows = (tiles + rows_per_block - 1) / rows_per_block * rows_per_block;
  uint32_t live[kGroupTiles];
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t n = (t0 + t) / per_image, ty = (t0 + t) % per_image / g.tw, tx = (t0 + t) % g.tw;
    const float* img = in + n * g.ih * g.iw * g.ic;
    uint64_t nonzero = 0;
    for (int64_t c0 = 0; c0 < g.ic; c0 += kLanes)
      input_tile(g, img, ty * 4 + g.oy, tx * 4 + g.ox, c0, v + t * g.ic + c0, sv, nonzero);
    live[t] = live_outputs(nonzero);
  }
  for (int64_t pt = 0; pt < kPoints; ++pt) {
    const float* vp = v + pt * sv;
    const float* up = u + pt * su;
    float* yp = y + pt * sy;
    if (g.oc % 64 == 0)
      gemm_point<6, 4>(vp, rows, g.ic, up, g.oc, yp);
    else if (g.oc % 32 == 0)
      gemm_point<8, 2>(vp, rows, g.ic, up, g.oc, yp);
    else
      gemm_point<8, 1>(vp, rows, g.ic, up, g.oc, yp);
  }
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t n = (t0 + t) / per_image, ty = (t0 + t) % per_image / g.tw, tx = (t0 + t) % g.tw;
    float* img = out + n * g.oh * g.ow * g.oc;
    for (int64_t o0 = 0; o0 < g.oc; o0 += kLanes) {
      f16 b = f16{};
      if (bias) load(b, bias + o0);
      output_tile(g, y + t * g.oc + o0, sy, b, relu, live[t], img, ty * 4, tx * 4, o0);
    }
  }
}

// w: Ember's (K, C, 3, 3) weights, read as filters_of_channel says; bias: oc floats or null. The
// parallel region is in this untargeted function and calls the AVX-512 workers (pointers only):
// Clang outlines an OpenMP region without its function's target attribute.
void run(const Conv& g, const float* in, const float* w, bool backward_data, const float* bias, bool relu, float* out,
         WinogradConvScratch& scratch) {
  const int64_t rows_per_block = block_rows(g.oc);
  const int64_t max_rows = (kGroupTiles + rows_per_block - 1) / rows_per_block * rows_per_block;
  // Point strides padded by a cache line, so that a tile's 36 stores do not alias in L1.
  const int64_t su = g.ic * g.oc + kLanes, sv = max_rows * g.ic + kLanes, sy = max_rows * g.oc + kLanes;
  const int64_t threads = omp_get_max_threads(), per_thread = kPoints * (sv + sy);
  const int64_t taps_floats = 9 * g.oc;  // one in-channel's taps, tap-major, per thread
  // One allocation, 64-byte aligned: U, then per thread its V, Y and a filter row.
  scratch.work.resize(size_t(kPoints * su + threads * (per_thread + taps_floats) + kLanes));
  float* const base = scratch.work.data();
  float* const u = base + (kLanes - reinterpret_cast<uintptr_t>(base) / sizeof(float) % kLanes) % kLanes;
  const int64_t total = g.n * g.th * g.tw, groups = (total + kGroupTiles - 1) / kGroupTiles;

#pragma omp parallel
  {
    float* const v = u + kPoints * su + omp_get_thread_num() * (per_thread + taps_floats);
    float* const y = v + kPoints * sv;
    float* const taps = y + kPoints * sy;
#pragma omp for schedule(static)
    for (int64_t i = 0; i < g.ic; ++i) filters_of_channel(w, i, g.ic, g.oc, backward_data, taps, u, su);
#pragma omp for schedule(static)
    for (int64_t grp = 0; grp < groups; ++grp) {
      const int64_t t0 = grp * kGroupTiles;
      run_group(g, in, u, su, bias, relu, out, t0, std::min(kGroupTiles, total - t0), v, sv, y, sy);
    }
  }
}
#endif

bool has_avx512() {
#ifdef EMBER_WINOGRAD_DATA
  return cpu_avx512();
#else
  return false;
#endif
}

// The shapes both passes take: 3x3 at stride 1, channels in whole vectors on both sides, outputs
// of at least one whole tile.
bool fits(const Conv2dShape& g) {
  return has_avx512() && g.r == 3 && g.s == 3 && g.stride_h == 1 && g.stride_w == 1 && g.c % 16 == 0 && g.k % 16 == 0 &&
         g.p >= 4 && g.q >= 4;
}
}  // namespace

bool conv2d_winograd_forward_fits(const Conv2dShape& g) { return fits(g); }
bool conv2d_winograd_backward_data_fits(const Conv2dShape& g) { return fits(g); }

void conv2d_winograd_forward(const Conv2dShape& g, const float* x, const float* w, const float* b, float* y,
                             WinogradConvScratch& scratch) {
  EMBER_CHECK(conv2d_winograd_forward_fits(g), ArgumentError, "conv2d (cpu): no Winograd forward for " + g.str());
#ifdef EMBER_WINOGRAD_DATA
  const Conv conv{g.n, g.h, g.w, g.c, g.p, g.q, g.k, -g.pad_top, -g.pad_left, (g.p + 3) / 4, (g.q + 3) / 4};
  run(conv, x, w, false, b, g.relu, y, scratch);
#else
  (void)x, (void)w, (void)b, (void)y, (void)scratch;
#endif
}

void conv2d_winograd_backward_data(const Conv2dShape& g, const float* dy, const float* w, float* dx,
                                   WinogradConvScratch& scratch) {
  EMBER_CHECK(conv2d_winograd_backward_data_fits(g), ArgumentError,
              "conv2d (cpu): no Winograd backward-data for " + g.str());
#ifdef EMBER_WINOGRAD_DATA
  const Conv conv{g.n, g.p, g.q, g.k, g.h, g.w, g.c, g.pad_top - 2, g.pad_left - 2, (g.h + 3) / 4, (g.w + 3) / 4};
  run(conv, dy, w, true, nullptr, false, dx, scratch);
#else
  (void)dy, (void)w, (void)dx, (void)scratch;
#endif
}

}  // namespace ember::cpu
