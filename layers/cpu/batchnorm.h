// Batch normalisation on the CPU, per channel of (N, C, H, W) NHWC input or per feature of
// row-major (N, F) input (as (N*H*W or N) rows of C values). Statistics are summed in double in
// fixed blocks of rows, so the result does not depend on the thread count.
#pragma once

#include "../../core/tensor.h"

namespace ember::cpu {

// Training: the batch's mean and biased variance per channel; y = gamma * (x - mean) * invstd +
// beta, invstd = 1 / sqrt(var + eps); save_mean and save_invstd (f32 (C,)) keep them for the
// backward; the running statistics move by `factor` (= 1 - Keras' momentum):
// r = (1 - factor) r + factor s, the variance's with Bessel's correction (M / (M - 1), as cuDNN).
void batchnorm_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, float factor, float eps,
                                Tensor& y, Tensor& running_mean, Tensor& running_var, Tensor& save_mean,
                                Tensor& save_invstd);
// Inference: y = gamma * (x - running_mean) / sqrt(running_var + eps) + beta.
void batchnorm_forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                                 const Tensor& running_var, float eps, Tensor& y);
// After the training forward: dgamma = sum(dy * xhat), dbeta = sum(dy) (written, =), and
// dx = gamma * invstd * (dy - dbeta / M - xhat * dgamma / M).
void batchnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                        const Tensor& save_invstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta);

}  // namespace ember::cpu
