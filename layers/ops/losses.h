// The losses' and metrics' dispatches (contracts: layers/cpu/losses.h). Private to the library.
#pragma once

#include <cstdint>

#include "../../core/tensor.h"
#include "../losses_kinds.h"

namespace ember::detail {

void point_loss_accumulate(PointLoss f, float param, const Tensor& z, const Tensor& t, Tensor& sums);
void point_loss_backward(PointLoss f, float param, const Tensor& z, const Tensor& t, Tensor& dz, int64_t mean_rows);
void categorical_xent_accumulate(float smoothing, const Tensor& z, const Tensor& t, Tensor& probs, Tensor& sums);
void categorical_xent_backward(float smoothing, const Tensor& probs, const Tensor& t, Tensor& dz, int64_t mean_rows);
void metric_accumulate(MetricKind m, float param, const Tensor& z, const Tensor& t, Tensor& sums, int64_t slot);

}  // namespace ember::detail
