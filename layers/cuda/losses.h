// The losses and metrics on the GPU: the contracts of layers/cpu/losses.h, on the stream of the
// tensors' device, never waiting for it (sums stay on the device).
#pragma once

#include <cstdint>

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"
#include "../losses_kinds.h"

namespace ember::cuda {

void point_loss_accumulate(Context& ctx, ::ember::detail::PointLoss f, float param, const Tensor& z, const Tensor& t,
                           Tensor& sums);
void point_loss_backward(Context& ctx, ::ember::detail::PointLoss f, float param, const Tensor& z, const Tensor& t,
                         Tensor& dz, int64_t mean_rows);
void categorical_xent_accumulate(Context& ctx, float smoothing, const Tensor& z, const Tensor& t, Tensor& probs,
                                 Tensor& sums);
void categorical_xent_backward(Context& ctx, float smoothing, const Tensor& probs, const Tensor& t, Tensor& dz,
                               int64_t mean_rows);
void metric_accumulate(Context& ctx, ::ember::detail::MetricKind m, float param, const Tensor& z, const Tensor& t,
                       Tensor& sums, int64_t slot);

}  // namespace ember::cuda
