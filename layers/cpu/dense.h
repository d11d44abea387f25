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

}  // namespace ember::cpu
