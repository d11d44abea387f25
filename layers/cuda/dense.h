// Dense on the GPU: cuBLAS SGEMM plus small bias/ReLU kernels; the contract of
// layers/cpu/dense.h (x (N, I), w (O, I) row-major, b (O), y (N, O)).
#pragma once

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"
#include "../cuda_ops.h"

namespace ember::cuda {

// Under set_fused_dense the forward is one cuBLASLt GEMM with the bias (+ ReLU) epilogue and the
// weight gradient one with the bias-gradient epilogue, where cuBLASLt offers them; `slot` (the
// op state's) finds their plans without a lock.
// With bf16 (the mixed_bf16 policy): x, w and the output gradient rounded to bf16 (to_bf16,
// bf16.h) for cuBLAS's bf16 GEMMs with fp32 accumulation and fp32 results; bias, ReLU and db in
// fp32: the CPU's dense_forward_bf16 / dense_backward_bf16 contract (set_fused_dense not used).
void dense_forward(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Tensor& y,
                   ::ember::detail::GpuPlanSlot* slot = nullptr, bool bf16 = false);
// With relu set, dz = dy * (y > 0) is written and used; else dz is not touched. dx may be null.
void dense_backward(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy, bool relu,
                    Tensor& dz, Tensor* dx, Tensor& dw, Tensor& db, ::ember::detail::GpuPlanSlot* slot = nullptr,
                    bool bf16 = false);
// Which path the forward and the weight gradient take for these tensors now, e.g. "cublasLt
// RELU_BIAS; cublasLt BGRADB" or "... ; unfused (cuBLASLt offers no algorithm (none found))"
// (makes the plans; the parity test asserts the path it tests).
std::string dense_kernel_info(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, bool relu,
                              const Tensor& y, const Tensor& dw);
// c (M, N) = a (M, K) x b (K, N), all f32 row-major on the context's device (ember::matmul).
void matmul(Context& ctx, const Tensor& a, const Tensor& b, Tensor& c);

}  // namespace ember::cuda
