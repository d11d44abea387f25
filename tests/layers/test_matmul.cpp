// matmul: against a naive loop; shape checks. The CPU's shared sgemm: rows computed alone.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "core/cpu/gemm.h"
#include "test_util.h"

namespace ember {
namespace {

TEST(Matmul, MatchesNaiveAndChecksShapes) {
  const Tensor a = test::random_tensor(Shape{5, 7}, 1), b = test::random_tensor(Shape{7, 3}, 2);
  const Tensor c = matmul(a, b);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) {
      double acc = 0;
      for (int k = 0; k < 7; ++k) acc += double(a.f32()[i * 7 + k]) * b.f32()[k * 3 + j];
      EXPECT_NEAR(c.f32()[i * 3 + j], acc, 1e-5);  // 7-term float sums, reordered by sgemm
    }
  EXPECT_THROW(matmul(a, a), ShapeError);
  Tensor wrong = Tensor::zeros(Shape{5, 4});
  EXPECT_THROW(matmul(a, b, wrong), ShapeError);
}

// The shared sgemm's contract (core/cpu/gemm.h): row i of C depends only on row i of op(A), B and
// K, bit for bit: not on M, on how the rows are split between calls, nor on the thread count (for
// one storage of A: oneDNN's kernels for A and A^T may round differently). Without it (oneDNN's sgemm on an AVX2
// machine: 457 of 8,192 outputs of a 64 x 1600 x 128 product differ from two 32-row calls) micro-batches, the Exact
// slices and replicas differ from one whole batch. Each value also within what float rounding of
// its K-term sum explains (K x 2^-24 x sum |terms|, the float64 sum's neighbourhood).
TEST(Sgemm, RowsAreComputedAloneWhateverTheSplitOrThreads) {
  Rng rng(9);
  for (const bool ta : {false, true})
    for (const bool tb : {false, true})
      for (const int64_t m : {1, 15, 16, 37, 64})
        for (const auto& [n, k] : {std::pair<int64_t, int64_t>{10, 128}, {128, 1600}, {64, 7}}) {
          SCOPED_TRACE(testing::Message() << "ta " << ta << " tb " << tb << " m " << m << " n " << n << " k " << k);
          std::vector<float> a(size_t(m * k)), b(size_t(n * k));
          for (float& v : a) v = rng.uniform(-1, 1);
          for (float& v : b) v = rng.uniform(-1, 1);
          const int64_t lda = ta ? m : k, ldb = tb ? k : n;
          const auto at = [&](int64_t i, int64_t l) { return ta ? a[size_t(l * m + i)] : a[size_t(i * k + l)]; };
          const auto bt = [&](int64_t l, int64_t j) { return tb ? b[size_t(j * k + l)] : b[size_t(l * n + j)]; };
          std::vector<float> whole(size_t(m * n)), single(size_t(m * n)), rows(size_t(m * n), -1.0f);
          cpu::sgemm(ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, whole.data(), n);
          const int threads = num_threads();
          set_num_threads(1);
          cpu::sgemm(ta, tb, m, n, k, 1.0f, a.data(), lda, b.data(), ldb, 0.0f, single.data(), n);
          set_num_threads(threads);
          EXPECT_EQ(single, whole);
          // Row by row, each row of op(A) copied out (stored as A is: a K x 1 column when transposed).
          for (int64_t i = 0; i < m; ++i) {
            std::vector<float> row(static_cast<size_t>(k));
            for (int64_t l = 0; l < k; ++l) row[size_t(l)] = at(i, l);
            cpu::sgemm(ta, tb, 1, n, k, 1.0f, row.data(), ta ? 1 : k, b.data(), ldb, 0.0f, rows.data() + i * n, n);
          }
          EXPECT_EQ(rows, whole);
          double worst = 0;
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
              double sum = 0, terms = 0;
              for (int64_t l = 0; l < k; ++l) {
                sum += double(at(i, l)) * bt(l, j);
                terms += std::fabs(double(at(i, l)) * bt(l, j));
              }
              worst = std::max(worst, std::fabs(whole[size_t(i * n + j)] - sum) / (double(k) * 0x1p-24 * terms));
            }
          EXPECT_LE(worst, 1.0);
        }
}

}  // namespace
}  // namespace ember
