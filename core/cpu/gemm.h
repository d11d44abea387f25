// The GEMM every CPU op shares: oneDNN's sgemm (200-255 GFLOP/s on the 2-core machines here;
// Debian's OpenBLAS misdetects their CPU).
#pragma once

#include <cstdint>

namespace ember::cpu {

// Rows of C are computed in blocks of kGemmRowBlock rows, each block one single-threaded oneDNN
// call (a last partial block in a zero-padded copy), the blocks shared between the OpenMP
// threads. So row i of C depends only on row i of op(A), B and K: never on M, on which rows share
// the call, or on the thread count. oneDNN's sgemm does not promise that by itself: on AVX2
// machines a 32-row call rounds its rows differently from a 64-row one, and with two threads it may
// split the K sum between them; micro-batches, the Exact slices and data-parallel replicas would
// then differ from one whole batch (docs/architecture.md, "Numerics").
inline constexpr int64_t kGemmRowBlock = 16;

// C (M x N) = alpha * op(A) op(B) + beta * C, row-major.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace ember::cpu
