// Dense on the CPU: oneDNN's sgemm (200-255 GFLOP/s here; Debian's OpenBLAS misdetects this
// CPU) plus a fused bias(+ReLU) loop.
// Shapes: x (N, I), w (O, I) row-major (PyTorch's convention), b (O), y (N, O).
#pragma once

#include "../../core/tensor.h"

namespace ember::cpu {

// y = act(x w^T + b), written (=).
void dense_forward(const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Tensor& y);
// y is the forward output (to undo a fused ReLU); dy is overwritten with the pre-activation
// gradient when relu is set. dw = dy^T x, db = sum_n dy, dx = dy w (skipped when dx is null).
void dense_backward(const Tensor& x, const Tensor& w, const Tensor& y, Tensor& dy, bool relu, Tensor* dx, Tensor& dw,
                    Tensor& db);

// C (M x N) = alpha * op(A) op(B) + beta * C, row-major; the GEMM every CPU op shares.
void sgemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
           const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace ember::cpu
