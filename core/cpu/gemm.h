// The GEMM every CPU op shares: oneDNN's sgemm (200-255 GFLOP/s on the 2-core machines here;
// Debian's OpenBLAS misdetects their CPU).
#pragma once

#include <cstdint>

namespace ember::cpu {

// C (M x N) = alpha * op(A) op(B) + beta * C, row-major.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace ember::cpu
