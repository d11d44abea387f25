// Dense on the CPU: oneDNN's sgemm (200-255 GFLOP/s here; Debian's OpenBLAS misdetects this
// CPU) plus a fused bias(+ReLU) loop; the weight gradient on Ember's own kernel (AVX-512 or AVX2)
// where it fits (dense.cpp).
// Shapes: x (N, I), w (O, I) row-major (PyTorch's convention), b (O), y (N, O).
#pragma once

#include <vector>

#include "../../core/tensor.h"
#include "bf16.h"

namespace ember::cpu {

// y = act(x w^T + b), written (=).
void dense_forward(const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Tensor& y);
// y is the forward output (to undo a fused ReLU). With relu set, the pre-activation gradient
// dz = dy * (y > 0) is written into `dz` (dy's shape) and used below; else dy is used and dz is
// not touched (it may be undefined). dw = dz^T x, db = sum_n dz, dx = dz w (skipped when dx is
// null; dw and db undefined: a frozen layer, neither computed). All written (=). dw and db are summed over the rows in
// the batch's sum order (core/pairwise_sum.h): each group of 16 rows alone, the groups as a pairwise tree. scratch: the
// groups' sums (the caller's, reused from call to call; a local one when null).
void dense_backward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy, bool relu, Tensor& dz,
                    Tensor* dx, Tensor& dw, Tensor& db, std::vector<float>* scratch = nullptr);

// Whether dense_backward's dw runs on Ember's own block kernel on this CPU and build (inputs a
// multiple of 32, outputs of 8; AVX-512, or AVX2 with FMA where the build targets it): each group's
// sums then the chain of fused multiply-adds from zero in row order. Else one sgemm per group.
bool dense_weight_gradient_kernel_fits(int64_t in, int64_t out);

// db = sum over the n rows of dz (n x out), in the batch's sum order (as dense_backward's), written (=).
void dense_bias_gradient(const float* dz, int64_t n, int64_t out, float* db);

// Under the mixed_bf16 policy (core/runtime.h): the products on matmul_bf16 (x, w and dz rounded to
// bf16, fp32 accumulation); the bias, ReLU and db in fp32 as above. The forward keeps x's bf16 copy
// in `keep` for the backward; dw is one product over the batch (not in its sum order), db is.
void dense_forward_bf16(const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Tensor& y, Bf16Buffers& keep);
void dense_backward_bf16(const Tensor& w, const Tensor& y, const Tensor& dy, bool relu, Tensor& dz, Tensor* dx,
                         Tensor& dw, Tensor& db, Bf16Buffers& keep);

}  // namespace ember::cpu
