// Batch normalisation on the GPU with cuDNN: the contract of layers/cpu/batchnorm.h, on the
// device's stream. x (and y, dy, dx: the same shape and layout) is (N, C, H, W) NCHW or NHWC,
// normalised per channel (CUDNN_BATCHNORM_SPATIAL), or row-major (N, F), normalised per feature
// (CUDNN_BATCHNORM_PER_ACTIVATION over an (N, F, 1, 1) view); gamma, beta, the running and the
// saved statistics are f32 (C,) (or (F,)). save_invstd is cuDNN's saved inverse variance,
// 1 / sqrt(var + eps), as the CPU's. `slot` (the op state's) keeps the plan.
#pragma once

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"
#include "../cuda_ops.h"

namespace ember::cuda {

void batchnorm_forward_training(Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, float factor,
                                float eps, Tensor& y, Tensor& running_mean, Tensor& running_var, Tensor& save_mean,
                                Tensor& save_invstd, ::ember::detail::GpuPlanSlot& slot);
void batchnorm_forward_inference(Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta,
                                 const Tensor& running_mean, const Tensor& running_var, float eps, Tensor& y,
                                 ::ember::detail::GpuPlanSlot& slot);
// The CPU twin's, plus eps (the forward's): cuDNN takes it again. dx, dgamma, dbeta written (=).
void batchnorm_backward(Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                        const Tensor& save_invstd, float eps, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                        ::ember::detail::GpuPlanSlot& slot);

}  // namespace ember::cuda
