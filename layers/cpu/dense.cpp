// Dense on the CPU: the forward and the input gradient on the shared sgemm (core/cpu/gemm.h), the
// weight gradient on Ember's own kernel where it fits (in the batch's sum order, core/pairwise_sum.h).
#include "dense.h"

#include <omp.h>

#include <algorithm>

#if defined(__x86_64__) && defined(__GNUC__) && defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include "../../core/cpu/cpu_features.h"
#include "../../core/cpu/gemm.h"
#include "../../core/error.h"
#include "../../core/pairwise_sum.h"
#include "relu.h"
#include "simd.h"

namespace ember::cpu {

namespace {
void check(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  EMBER_CHECK(x.rank() == 2 && w.rank() == 2 && x.dim(1) == w.dim(1), ShapeError,
              "dense (cpu): input " + x.shape().str() + " does not fit weights " + w.shape().str() +
                  " (expected input (N, " + std::to_string(w.rank() == 2 ? w.dim(1) : -1) + "))");
  EMBER_CHECK(!b.defined() || b.shape() == Shape{w.dim(0)}, ShapeError,  // undefined: a frozen layer's db
              "dense (cpu): bias must be (" + std::to_string(w.dim(0)) + ",), got " + b.shape().str());
  EMBER_CHECK(y.shape() == (Shape{x.dim(0), w.dim(0)}), ShapeError,
              "dense (cpu): output must be " + Shape{x.dim(0), w.dim(0)}.str() + ", got " + y.shape().str());
  for (const Tensor* t : {&x, &w, &b, &y})
    EMBER_CHECK(!t->defined() || (t->dtype() == DType::F32 && t->device().is_cpu() && t->layout() == Layout::RowMajor),
                ShapeError, "dense (cpu): expects f32 row-major cpu tensors, got " + t->str());
}
}  // namespace

void dense_forward(const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Tensor& y) {
  check(x, w, b, y);
  const int64_t n = x.dim(0), in = x.dim(1), out = w.dim(0);
  float* yp = y.f32();
  const float* bp = b.f32();
  sgemm(false, true, n, out, in, 1.0f, x.f32(), in, w.f32(), in, 0.0f, yp, out);
  for (int64_t i = 0; i < n; ++i) {
    float* row = yp + i * out;
    if (relu) {
#pragma omp simd
      for (int64_t j = 0; j < out; ++j) row[j] = std::max(row[j] + bp[j], 0.0f);
    } else {
#pragma omp simd
      for (int64_t j = 0; j < out; ++j) row[j] += bp[j];
    }
  }
}

namespace {
constexpr int64_t kBlockO = 8, kBlockI = 32, kBlockFloats = kBlockO * kBlockI;

// One (8 outputs, 32 inputs) block's sum over the rows [r0, r1) of g (n x out) and x (n x in),
// from zero, in row order: 16 accumulators of 16 lanes, per row 2 loads of x, 8 broadcasts of g.
// Written to s (8 x 32). AVX-512 (the target attribute); called only after the CPU check.
#if defined(__x86_64__) && defined(__GNUC__)
EMBER_AVX512 void block_rows(const float* g, const float* x, int64_t in, int64_t out, int64_t o0, int64_t i0,
                             int64_t r0, int64_t r1, float* s) {
  using simd::f16;
  using simd::f16u;
  f16 acc[kBlockO][2];
  for (int64_t k = 0; k < kBlockO; ++k) acc[k][0] = acc[k][1] = f16{};
  for (int64_t r = r0; r < r1; ++r) {
    const f16 u0 = *reinterpret_cast<const f16u*>(x + r * in + i0);
    const f16 u1 = *reinterpret_cast<const f16u*>(x + r * in + i0 + 16);
    const float* gr = g + r * out + o0;
#pragma GCC unroll 8
    for (int64_t k = 0; k < kBlockO; ++k) {
      acc[k][0] += gr[k] * u0;
      acc[k][1] += gr[k] * u1;
    }
  }
  for (int64_t k = 0; k < kBlockO; ++k)
    for (int64_t h = 0; h < 2; ++h) *reinterpret_cast<f16u*>(s + k * kBlockI + h * 16) = acc[k][h];
}
#endif

// The same block on AVX2 in four passes of 4 outputs by 16 inputs (8 accumulators of 8 lanes; per
// row 2 loads of x, 4 broadcasts of g). Each element's sum is the same chain of fused multiply-adds
// (written out, so that no tuning that declines to contract 256-bit chains can change it) from zero
// in row order as block_rows', so the two kernels give the same bits. oneDNN's AVX2 sgemm, which
// took these shapes before, computed that chain too where checked (the AVX2 engine fixtures, a
// GPT's checkpoints).
#if defined(__x86_64__) && defined(__GNUC__) && defined(__AVX2__) && defined(__FMA__)
void block_rows_avx2(const float* g, const float* x, int64_t in, int64_t out, int64_t o0, int64_t i0, int64_t r0,
                     int64_t r1, float* s) {
  for (int64_t ko = 0; ko < kBlockO; ko += 4)
    for (int64_t ki = 0; ki < kBlockI; ki += 16) {
      __m256 acc[4][2];
      for (int64_t k = 0; k < 4; ++k) acc[k][0] = acc[k][1] = _mm256_setzero_ps();
      for (int64_t r = r0; r < r1; ++r) {
        const __m256 u0 = _mm256_loadu_ps(x + r * in + i0 + ki), u1 = _mm256_loadu_ps(x + r * in + i0 + ki + 8);
        const float* gr = g + r * out + o0 + ko;
#pragma GCC unroll 4
        for (int64_t k = 0; k < 4; ++k) {
          const __m256 gk = _mm256_broadcast_ss(gr + k);
          acc[k][0] = _mm256_fmadd_ps(gk, u0, acc[k][0]);
          acc[k][1] = _mm256_fmadd_ps(gk, u1, acc[k][1]);
        }
      }
      for (int64_t k = 0; k < 4; ++k)
        for (int64_t h = 0; h < 2; ++h) _mm256_storeu_ps(s + (ko + k) * kBlockI + ki + h * 8, acc[k][h]);
    }
}
#endif

// dw = g^T x (out x in) in the batch's sum order, block by block: each group's block sum from zero
// (block_rows, or block_rows_avx2 without AVX-512), the groups as the pairwise tree in a thread's
// own slots (L1-sized). The threads split the blocks; each block's sums are the same whichever
// thread runs it.
void own_weight_gradient(const float* g, const float* x, int64_t n, int64_t in, int64_t out, float* dw,
                         std::vector<float>& scratch) {
#if defined(__x86_64__) && defined(__GNUC__)
#if defined(__AVX2__) && defined(__FMA__)
  const auto block_sum = cpu_avx512() ? block_rows : block_rows_avx2;
#else
  const auto block_sum = block_rows;
#endif
  const int64_t blocks_i = in / kBlockI, blocks = out / kBlockO * blocks_i, groups = batch_groups(n);
  const int64_t slots = PairwiseTree::slots_for(groups), threads = omp_in_parallel() ? 1 : omp_get_max_threads();
  scratch.resize(size_t(threads * slots * kBlockFloats));
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    float* const mine = scratch.data() + omp_get_thread_num() * slots * kBlockFloats;
    const auto merge = [mine](int64_t into, int64_t from) {
      float* to = mine + into * kBlockFloats;
      const float* add = mine + from * kBlockFloats;
#pragma omp simd
      for (int64_t e = 0; e < kBlockFloats; ++e) to[e] += add[e];
    };
#pragma omp for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t o0 = b / blocks_i * kBlockO, i0 = b % blocks_i * kBlockI;
      PairwiseTree tree;
      for (int64_t j = 0; j < groups; ++j) {
        block_sum(g, x, in, out, o0, i0, j * kBatchGroupRows, std::min(n, (j + 1) * kBatchGroupRows),
                  mine + tree.next_slot() * kBlockFloats);
        tree.push(merge);
      }
      tree.finish(merge);
      for (int64_t k = 0; k < kBlockO; ++k) std::copy_n(mine + k * kBlockI, kBlockI, dw + (o0 + k) * in + i0);
    }
  }
#else
  (void)g, (void)x, (void)n, (void)in, (void)out, (void)dw, (void)scratch;
#endif
}
}  // namespace

// dense.h: blocks of 8 outputs by 32 inputs tile dw, and the CPU runs one of own_weight_gradient's
// block kernels: AVX-512 (cpu_avx512(): not capped by EMBER_MAX_CPU_ISA), or AVX2 with FMA where
// the build targets them (EMBER_CPU_ARCH x86-64-v3, the default).
bool dense_weight_gradient_kernel_fits(int64_t in, int64_t out) {
#if defined(__x86_64__) && defined(__GNUC__)
#if defined(__AVX2__) && defined(__FMA__)
  constexpr bool kAvx2Kernel = true;
#else
  constexpr bool kAvx2Kernel = false;
#endif
  return in % kBlockI == 0 && out % kBlockO == 0 && (kAvx2Kernel || cpu_avx512());
#else
  (void)in, (void)out;
  return false;
#endif
}

void dense_bias_gradient(const float* dz, int64_t n, int64_t out, float* db) {
  // Each group's column sums in row order (from zero, a row at a time across the columns), the
  // groups as the tree (pairwise_reduce's doubling strides: pairwise_sum's tree).
  const int64_t groups = batch_groups(n);
  thread_local std::vector<float> bias_parts;  // grows to the largest batch, then stays
  bias_parts.assign(size_t(std::max<int64_t>(groups, 1) * out), 0.0f);
  for (int64_t j = 0; j < groups; ++j) {
    float* s = bias_parts.data() + j * out;
    for (int64_t r = j * kBatchGroupRows; r < std::min(n, (j + 1) * kBatchGroupRows); ++r) {
      const float* row = dz + r * out;
#pragma omp simd
      for (int64_t o = 0; o < out; ++o) s[o] += row[o];
    }
  }
  pairwise_reduce(bias_parts.data(), groups, out, out);
  std::copy_n(bias_parts.data(), out, db);
}

void dense_backward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy, bool relu, Tensor& dz,
                    Tensor* dx, Tensor& dw, Tensor& db, std::vector<float>* scratch) {
  const bool params = dw.defined();  // undefined: a frozen layer, dx alone
  check(x, w, db, dy);
  EMBER_CHECK((!params || dw.shape() == w.shape()) && y.shape() == dy.shape(), ShapeError,
              "dense (cpu): gradient shapes do not match: dw " + dw.shape().str() + ", dy " + dy.shape().str());
  if (dx)
    EMBER_CHECK(dx->shape() == x.shape(), ShapeError,
                "dense (cpu): input gradient must be " + x.shape().str() + ", got " + dx->shape().str());
  const int64_t n = x.dim(0), in = x.dim(1), out = w.dim(0);
  if (relu) relu_backward(y, dy, dz);  // checks dz: f32, dy's shape and layout
  const float* g = relu ? dz.f32() : dy.f32();
  std::vector<float> local;
  std::vector<float>& parts = scratch ? *scratch : local;
  const int64_t groups = batch_groups(n);
  // The batch's sum order (core/pairwise_sum.h): each group of 16 rows summed on its own, the
  // groups added as the pairwise tree. dw by Ember's own kernel where it fits, else one sgemm
  // per group (K = the group's rows) into a slot of parts, the slots merged as the groups come
  // (PairwiseTree: pairwise_reduce's tree in log2(groups) + 2 slots of dw's size, not one a group:
  // 8 copies of the weight matrix for a 768-row batch instead of 48).
  if (!params) {
    // a frozen layer: no parameter gradient
  } else if (n == 0) {  // an empty batch: no terms
    std::fill_n(dw.f32(), out * in, 0.0f);
  } else if (dense_weight_gradient_kernel_fits(in, out)) {
    own_weight_gradient(g, x.f32(), n, in, out, dw.f32(), parts);
  } else if (groups <= 1) {
    sgemm(true, false, out, in, n, 1.0f, g, out, x.f32(), in, 0.0f, dw.f32(), in);
  } else {
    const int64_t part = out * in;
    parts.resize(size_t(std::min(groups, PairwiseTree::slots_for(groups)) * part));  // next_slot() <= the groups so far
    float* const slots = parts.data();
    // Slot `into` += slot `from` (= into + 1): pairwise_reduce of the two, the threads splitting it.
    const auto merge = [slots, part](int64_t into, int64_t from) {
      pairwise_reduce(slots + into * part, 2, part, (from - into) * part);
    };
    PairwiseTree tree;
    for (int64_t j = 0; j < groups; ++j) {
      const int64_t r0 = j * kBatchGroupRows;
      sgemm(true, false, out, in, std::min(kBatchGroupRows, n - r0), 1.0f, g + r0 * out, out, x.f32() + r0 * in, in,
            0.0f, slots + tree.next_slot() * part, in);
      tree.push(merge);
    }
    tree.finish(merge);
    std::copy_n(slots, part, dw.f32());
  }
  if (params) dense_bias_gradient(g, n, out, db.f32());
  if (dx) sgemm(false, false, n, in, out, 1.0f, g, out, w.f32(), in, 0.0f, dx->f32(), in);
}

}  // namespace ember::cpu
