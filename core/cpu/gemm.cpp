// sgemm on oneDNN, in row blocks (see gemm.h).
#include "gemm.h"

#include <omp.h>

#include <algorithm>
#include <vector>

#include "dnnl_context.h"

namespace ember::cpu {

namespace {
// One oneDNN call on the calling thread alone: inside the blocks' parallel loop each thread's
// own count is set to 1, so oneDNN neither nests nor splits the call's sums between threads.
dnnl_status_t call(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
                   int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  return dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

// The calling thread's OpenMP thread count set to 1 for a scope (restored on the way out).
class OneThread {
 public:
  OneThread() : saved_(omp_get_max_threads()) { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(saved_); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int saved_;
};

// The rows [r0, r0 + rows) of op(A) and C, rows < kGemmRowBlock, computed as a whole block in
// zero-padded copies (the same call shape as every other block, so the same rounding per row).
dnnl_status_t partial_block(bool trans_a, bool trans_b, int64_t rows, int64_t r0, int64_t n, int64_t k, float alpha,
                            const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
                            int64_t ldc) {
  constexpr int64_t kb = kGemmRowBlock;
  // op(A)'s rows as stored: transposed A holds them as columns (k x kb, leading dimension kb).
  std::vector<float> ap(static_cast<size_t>(kb * k), 0.0f), cp(static_cast<size_t>(kb * n), 0.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < k; ++j) {
      const float v = trans_a ? a[j * lda + r0 + r] : a[(r0 + r) * lda + j];
      (trans_a ? ap[static_cast<size_t>(j * kb + r)] : ap[static_cast<size_t>(r * k + j)]) = v;
    }
  if (beta != 0.0f)
    for (int64_t r = 0; r < rows; ++r) std::copy_n(c + (r0 + r) * ldc, n, cp.data() + r * n);
  const dnnl_status_t st =
      call(trans_a, trans_b, kb, n, k, alpha, ap.data(), trans_a ? kb : k, b, ldb, beta, cp.data(), n);
  if (st == dnnl_success)
    for (int64_t r = 0; r < rows; ++r) std::copy_n(cp.data() + r * n, n, c + (r0 + r) * ldc);
  return st;
}
}  // namespace

void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {  // C = beta * C (oneDNN's answer too), row by row
    for (int64_t r = 0; r < m; ++r)
      for (int64_t j = 0; j < n; ++j) c[r * ldc + j] = beta == 0.0f ? 0.0f : beta * c[r * ldc + j];
    return;
  }
  constexpr int64_t kb = kGemmRowBlock;
  const int64_t blocks = (m + kb - 1) / kb;
  const auto block = [&](int64_t i) {
    const int64_t r0 = i * kb, rows = std::min(kb, m - r0);
    if (rows < kb) return partial_block(trans_a, trans_b, rows, r0, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return call(trans_a, trans_b, kb, n, k, alpha, trans_a ? a + r0 : a + r0 * lda, lda, b, ldb, beta, c + r0 * ldc,
                ldc);
  };
  dnnl_status_t failed = dnnl_success;
  if (blocks == 1 || omp_in_parallel()) {
    const OneThread one;
    for (int64_t i = 0; i < blocks && failed == dnnl_success; ++i) failed = block(i);
  } else {
#pragma omp parallel
    {
      const OneThread one;  // this thread's own count: its oneDNN calls run on it alone
      dnnl_status_t mine = dnnl_success;
#pragma omp for schedule(static)
      for (int64_t i = 0; i < blocks; ++i)
        if (mine == dnnl_success) mine = block(i);
#pragma omp critical(ember_sgemm_status)
      if (failed == dnnl_success) failed = mine;
    }
  }
  EMBER_DNNL_CHECK(failed);
}

}  // namespace ember::cpu
