// Direct weight gradient on NHWC (see conv2d_direct.h). The work is cut into blocks of (tap r s,
// 8 filters, 32 channels): a block's 8 x 32 sums live in 16 vector registers while it runs over
// the chunk's output positions (per position 2 loads of x, 8 broadcasts of dy, 16 fused
// multiply-adds), then go back to the per-tap sums in scratch. The threads split the blocks, each
// thread the same blocks in every chunk, so no thread reads another's sums until dw is written
// out; x and dy are only read. AVX-512 only: every function that touches a vector is compiled for
// it (the target attribute) whatever the build's target and runs only after the CPU check.
#include "conv2d_direct.h"

#include <omp.h>

#include <algorithm>
#include <cstdint>

#include "../../core/cpu/cpu_features.h"
#include "../../core/error.h"
#include "../../core/pairwise_sum.h"
#include "simd.h"

namespace ember::cpu {

namespace {
constexpr int64_t kBlockK = 8, kBlockC = 32;
// Images per chunk: as many as keep a chunk's x and dy within this many bytes (every thread reads
// all of it, so each core's L2 holds it), at least one.
constexpr int64_t kChunkBytes = 512 * 1024;

// The output rows (or columns) whose input row p * stride + tap - pad lies inside [0, in):
// [lo, hi) of [0, out).
struct Range {
  int64_t lo, hi;
};
Range valid(int64_t out, int64_t in, int64_t stride, int64_t tap, int64_t pad) {
  const int64_t first = tap - pad;  // input index at output 0
  const int64_t lo = first >= 0 ? 0 : (-first + stride - 1) / stride;
  const int64_t hi = in - first <= 0 ? 0 : std::min(out, (in - first - 1) / stride + 1);
  return {lo, std::max(lo, hi)};
}

#if defined(__x86_64__) && defined(__GNUC__)
#define EMBER_DIRECT_WGRAD 1
using simd::f16;
using simd::f16u;

// One block over images [n0, n1): sums (row stride C, at (k0, c0) of its tap) = (first ? 0 :
// sums) + sum over the valid positions of dy[pos][k0 + k] * x[pos under tap][c0 + c].
EMBER_AVX512 void block_sums(const Conv2dShape& g, const float* x, const float* dy, int64_t r, int64_t s, int64_t k0,
                             int64_t c0, int64_t n0, int64_t n1, bool first, float* sums) {
  f16 acc[kBlockK][2];
  for (int64_t k = 0; k < kBlockK; ++k)
    for (int64_t h = 0; h < 2; ++h)
      acc[k][h] = first ? f16{} : *reinterpret_cast<const f16u*>(sums + (k0 + k) * g.c + c0 + h * 16);
  Range rows = valid(g.p, g.h, g.stride_h, r, g.pad_top);
  const Range cols = valid(g.q, g.w, g.stride_w, s, g.pad_left);
  if (cols.lo == cols.hi) rows.hi = rows.lo;  // no position (and no pointer formed past x's end)
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t p = rows.lo; p < rows.hi; ++p) {
      const int64_t ih = p * g.stride_h + r - g.pad_top;
      const float* xp = x + ((n * g.h + ih) * g.w + cols.lo * g.stride_w + s - g.pad_left) * g.c + c0;
      const float* dyp = dy + ((n * g.p + p) * g.q + cols.lo) * g.k + k0;
      for (int64_t q = cols.lo; q < cols.hi; ++q, xp += g.stride_w * g.c, dyp += g.k) {
        const f16 u0 = *reinterpret_cast<const f16u*>(xp);
        const f16 u1 = *reinterpret_cast<const f16u*>(xp + 16);
#pragma GCC unroll 8  // the accumulators stay in registers at -O2 too
        for (int64_t k = 0; k < kBlockK; ++k) {
          acc[k][0] += dyp[k] * u0;
          acc[k][1] += dyp[k] * u1;
        }
      }
    }
  for (int64_t k = 0; k < kBlockK; ++k)
    for (int64_t h = 0; h < 2; ++h) *reinterpret_cast<f16u*>(sums + (k0 + k) * g.c + c0 + h * 16) = acc[k][h];
}
#endif
}  // namespace

bool conv2d_direct_weight_gradient_fits(const Conv2dShape& g) {
#ifdef EMBER_DIRECT_WGRAD
  return g.c > 0 && g.k > 0 && g.c % kBlockC == 0 && g.k % kBlockK == 0 && g.n > 0 && g.p > 0 && g.q > 0 &&
         cpu_avx512();
#else
  (void)g;
  return false;
#endif
}

void conv2d_direct_weight_gradient(const Conv2dShape& g, const float* x, const float* dy, float* dw, float* db,
                                   std::vector<float>& scratch) {
  EMBER_CHECK(conv2d_direct_weight_gradient_fits(g), ArgumentError,
              "conv2d (cpu): no direct weight gradient for " + g.str());
#ifdef EMBER_DIRECT_WGRAD
  const int64_t taps = g.r * g.s, kc = g.k * g.c;
  const int64_t blocks_k = g.k / kBlockK, blocks_c = g.c / kBlockC, blocks = taps * blocks_k * blocks_c;
  const int64_t image_bytes = (g.h * g.w * g.c + g.p * g.q * g.k) * int64_t(sizeof(float));
  const int64_t chunk = std::max<int64_t>(1, kChunkBytes / image_bytes);
  // The batch's sum order (core/pairwise_sum.h): each group of 16 images summed from zero, the
  // groups' sums added as the pairwise tree as they come (PairwiseTree's slots, each sums[tap][k][c]).
  const int64_t groups = batch_groups(g.n), slot = taps * kc;
  scratch.resize(size_t(PairwiseTree::slots_for(groups) * slot));
  float* const sums = scratch.data();
#pragma omp parallel
  {
    // The same blocks on this thread in every chunk: each block's sums are read only by the
    // thread that wrote them, in chunk order, so no barrier between chunks; each thread merges its
    // own blocks' subtrees (every thread's tree has the same shape).
    const int64_t tid = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t b0 = blocks * tid / nt, b1 = blocks * (tid + 1) / nt;
    const auto block_at = [&](int64_t b) {
      const int64_t tap = b / (blocks_k * blocks_c), kb = b / blocks_c % blocks_k, cb = b % blocks_c;
      return tap * kc + kb * kBlockK * g.c + cb * kBlockC;
    };
    const auto merge = [&](int64_t into, int64_t from) {
      for (int64_t b = b0; b < b1; ++b)
        for (int64_t k = 0; k < kBlockK; ++k) {
          float* to = sums + into * slot + block_at(b) + k * g.c;
          const float* add = sums + from * slot + block_at(b) + k * g.c;
#pragma omp simd
          for (int64_t c = 0; c < kBlockC; ++c) to[c] += add[c];
        }
    };
    PairwiseTree tree;
    for (int64_t j = 0; j < groups; ++j) {
      const int64_t first = j * kBatchGroupRows, end = std::min(g.n, first + kBatchGroupRows);
      float* const out = sums + tree.next_slot() * slot;
      for (int64_t n0 = first; n0 < end; n0 += chunk)
        for (int64_t b = b0; b < b1; ++b) {
          const int64_t tap = b / (blocks_k * blocks_c), kb = b / blocks_c % blocks_k, cb = b % blocks_c;
          block_sums(g, x, dy, tap / g.s, tap % g.s, kb * kBlockK, cb * kBlockC, n0, std::min(end, n0 + chunk),
                     n0 == first, out + tap * kc);
        }
      tree.push(merge);
    }
    tree.finish(merge);
#pragma omp barrier
    // db: each group's output positions' dy in order, in double, rounded to float; the groups as
    // the tree.
    const int64_t positions = kBatchGroupRows * g.p * g.q;
#pragma omp for schedule(static)
    for (int64_t k = 0; k < g.k; ++k) {
      for (int64_t c = 0; c < g.c; ++c)
        for (int64_t t = 0; t < taps; ++t) dw[(k * g.c + c) * taps + t] = sums[t * kc + k * g.c + c];
      db[k] = pairwise_sum(0, groups, k, [&](int64_t j, int64_t kk) {
        double b = 0;
        for (int64_t i = j * positions; i < std::min(g.n * g.p * g.q, (j + 1) * positions); ++i) b += dy[i * g.k + kk];
        return float(b);
      });
    }
  }
#else
  (void)x, (void)dy, (void)dw, (void)db, (void)scratch;
#endif
}

}  // namespace ember::cpu
