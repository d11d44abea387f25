// The losses beyond softmax cross-entropy on sparse labels, and the metrics, on the CPU. Shapes:
// outputs z f32 (N, ...) row-major; targets t f32 of z's shape (point losses, categorical ones:
// (N, K)) or i32 (N) (sparse metrics). sums: MetricSums' f64 slots (layers/metrics.h):
// [0] += the batch's loss sum, [3] += 1 while that sum stays finite; a metric adds to [slot].
#pragma once

#include <cstdint>

#include "../../core/tensor.h"
#include "../losses_kinds.h"

namespace ember::cpu {

// sums[0] += sum over rows of the mean over the row's elements of f(z, t).
void point_loss_accumulate(detail::PointLoss f, float param, const Tensor& z, const Tensor& t, Tensor& sums);
// dz = d(sum over rows of their means / mean_rows)/dz, written (=).
void point_loss_backward(detail::PointLoss f, float param, const Tensor& z, const Tensor& t, Tensor& dz,
                         int64_t mean_rows);
// Categorical cross-entropy from logits z (N, K) and targets t (N, K), smoothed to
// t (1 - s) + s / K: probs = softmax(z); sums[0] += sum over rows of -sum_k t_k log probs_k.
void categorical_xent_accumulate(float smoothing, const Tensor& z, const Tensor& t, Tensor& probs, Tensor& sums);
// dz = (probs sum_k t_k - t) / mean_rows with t smoothed, written (=).
void categorical_xent_backward(float smoothing, const Tensor& probs, const Tensor& t, Tensor& dz, int64_t mean_rows);
// sums[slot] += sum over rows of the metric's per-sample value (layers/losses_kinds.h).
// param: top-k's k, binary accuracy's threshold. A sparse label outside [0, K) is never a hit.
void metric_accumulate(detail::MetricKind m, float param, const Tensor& z, const Tensor& t, Tensor& sums, int64_t slot);

}  // namespace ember::cpu
