// The built-in losses' and metrics' per-element and per-row formulas, shared by the CPU loops
// (layers/cpu/losses.cpp) and the CUDA kernels (layers/cuda/losses.cu) so the two compute the
// same expressions in the same order. Private to the library.
#pragma once

#include <math.h>
#include <stdint.h>

#include "host_device.h"
#include "losses_kinds.h"

namespace ember::detail {

inline constexpr float kProbEpsilon = 1e-7f;  // Keras' epsilon(): probabilities clipped to [eps, 1 - eps]

// One element's loss, in double.
EMBER_HD inline double point_value(PointLoss f, float param, float z, float t) {
  switch (f) {
    case PointLoss::SquaredError: {
      const double e = static_cast<double>(z) - t;
      return e * e;
    }
    case PointLoss::AbsoluteError:
      return fabs(static_cast<double>(z) - t);
    case PointLoss::Huber: {
      const double e = fabs(static_cast<double>(z) - t), d = param;
      return e <= d ? 0.5 * e * e : d * (e - 0.5 * d);
    }
    case PointLoss::BinaryXentLogits: {
      const double ts = t * (1.0 - param) + 0.5 * param, x = z;
      return (x > 0.0 ? x : 0.0) - x * ts + log1p(exp(-fabs(x)));
    }
    case PointLoss::BinaryXentProbabilities: {
      double p = z;
      p = p < kProbEpsilon ? kProbEpsilon : (p > 1.0 - kProbEpsilon ? 1.0 - kProbEpsilon : p);
      const double ts = t * (1.0 - param) + 0.5 * param;
      return -(ts * ::log(p + kProbEpsilon) + (1.0 - ts) * ::log(1.0 - p + kProbEpsilon));
    }
  }
  return 0.0;
}

// d(element's loss)/dz, in float.
EMBER_HD inline float point_grad(PointLoss f, float param, float z, float t) {
  switch (f) {
    case PointLoss::SquaredError:
      return 2.0f * (z - t);
    case PointLoss::AbsoluteError:
      return z > t ? 1.0f : (z < t ? -1.0f : 0.0f);  // 0 at a tie, as TF and PyTorch
    case PointLoss::Huber: {
      const float e = z - t;
      return fabsf(e) <= param ? e : (e > 0.0f ? param : -param);
    }
    case PointLoss::BinaryXentLogits:
      return 1.0f / (1.0f + expf(-z)) - (t * (1.0f - param) + 0.5f * param);
    case PointLoss::BinaryXentProbabilities: {
      if (z < kProbEpsilon || z > 1.0f - kProbEpsilon) return 0.0f;  // clipped: no gradient (TF's clip)
      const float ts = t * (1.0f - param) + 0.5f * param;
      return -(ts / (z + kProbEpsilon) - (1.0f - ts) / (1.0f - z + kProbEpsilon));
    }
  }
  return 0.0f;
}

// A row's mean over its `per` elements of the point loss.
EMBER_HD inline double point_row(PointLoss f, float param, const float* z, const float* t, int64_t per) {
  double row = 0.0;
  for (int64_t j = 0; j < per; ++j) row += point_value(f, param, z[j], t[j]);
  return row / static_cast<double>(per);
}

// The first maximum's index.
EMBER_HD inline int64_t row_argmax(const float* row, int64_t k) {
  int64_t b = 0;
  for (int64_t j = 1; j < k; ++j)
    if (row[j] > row[b]) b = j;
  return b;
}

// Softmax of a row of k values z into p, shifted by the row's maximum z[*best] (its first argmax;
// 0 for an empty row) for stability; returns the sum of the shifted exponentials, added in double.
// Every softmax of a row runs this: the Softmax layer and the softmax cross-entropies, on the CPU
// and in the CUDA kernels.
EMBER_HD inline double softmax_row(const float* z, float* p, int64_t k, int64_t* best) {
  *best = row_argmax(z, k);
  const float m = k > 0 ? z[*best] : 0.0f;
  double sum = 0.0;
  for (int64_t j = 0; j < k; ++j) {
    p[j] = expf(z[j] - m);
    sum += p[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < k; ++j) p[j] *= inv;
  return sum;
}

// Softmax of a row into p (softmax_row) and the categorical cross-entropy against targets t
// smoothed to t (1 - s) + s / k: -sum_j t_j log p_j, in double.
EMBER_HD inline double categorical_row(float smoothing, const float* z, const float* t, float* p, int64_t k) {
  int64_t best = 0;
  const double sum = softmax_row(z, p, k, &best);
  const float m = z[best];
  const double lse = ::log(sum);  // log sum_j exp(z_j - m)
  double row = 0.0;
  for (int64_t j = 0; j < k; ++j) {
    const double tj = t[j] * (1.0 - smoothing) + smoothing / static_cast<double>(k);
    row += tj * (lse - static_cast<double>(z[j] - m));
  }
  return row;
}

// dz of a row: (p sum_j t_j - t) * scale, t smoothed.
EMBER_HD inline void categorical_row_grad(float smoothing, const float* p, const float* t, float* d, int64_t k,
                                          float scale) {
  const float uniform = smoothing / static_cast<float>(k);
  float tsum = 0.0f;
  for (int64_t j = 0; j < k; ++j) tsum += t[j] * (1.0f - smoothing) + uniform;
  for (int64_t j = 0; j < k; ++j) d[j] = (p[j] * tsum - (t[j] * (1.0f - smoothing) + uniform)) * scale;
}

// A row's metric value. Sparse kinds read `label` (an index outside [0, per) is never a hit);
// the others read the row's targets t.
EMBER_HD inline double metric_row(MetricKind m, float param, const float* z, const float* t, int32_t label,
                                  int64_t per) {
  switch (m) {
    case MetricKind::SparseAccuracy:
      return label >= 0 && label < per && row_argmax(z, per) == label ? 1.0 : 0.0;
    case MetricKind::SparseTopK: {
      if (label < 0 || label >= per) return 0.0;
      int64_t greater = 0;
      for (int64_t j = 0; j < per; ++j) greater += z[j] > z[label] ? 1 : 0;
      return greater < static_cast<int64_t>(param) ? 1.0 : 0.0;
    }
    case MetricKind::CategoricalAccuracy:
      return row_argmax(z, per) == row_argmax(t, per) ? 1.0 : 0.0;
    default:
      break;
  }
  double row = 0.0;
  for (int64_t j = 0; j < per; ++j) {
    const double e = static_cast<double>(z[j]) - t[j];
    if (m == MetricKind::BinaryAccuracy)
      row += (z[j] > param ? 1.0f : 0.0f) == t[j] ? 1.0 : 0.0;
    else
      row += m == MetricKind::AbsoluteError ? fabs(e) : e * e;
  }
  return row / static_cast<double>(per);
}

}  // namespace ember::detail
