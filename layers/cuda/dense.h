// Dense on the GPU: cuBLAS SGEMM plus small bias/ReLU kernels; the contract of
// layers/cpu/dense.h (x (N, I), w (O, I) row-major, b (O), y (N, O)).
#pragma once

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"

namespace ember::cuda {

void dense_forward(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Tensor& y);
// With relu set, dz = dy * (y > 0) is written and used; else dz is not touched. dx may be null.
void dense_backward(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy, bool relu,
                    Tensor& dz, Tensor* dx, Tensor& dw, Tensor& db);
// c (M, N) = a (M, K) x b (K, N), all f32 row-major on the context's device (ember::matmul).
void matmul(Context& ctx, const Tensor& a, const Tensor& b, Tensor& c);

}  // namespace ember::cuda
