// Layer normalisation of one row of c values: the formulas both backends run, in the same order
// (layers/cpu/layernorm.cpp; layers/cuda/layernorm.cu, a thread per row). Sums run in kLnLanes
// float lanes (lane l takes elements l, l + 16, ...) folded as a fixed tree: the CPU's loops
// vectorise and every backend and thread count adds in the same order. Private to the library.
#pragma once

#include <math.h>

#include <cstdint>

#include "host_device.h"

namespace ember::detail {

inline constexpr int kLnLanes = 16;

// The lanes' sum: halves added pairwise (l[i] += l[i + s], s = 8, 4, 2, 1); l is overwritten.
EMBER_HD inline float ln_fold(float* l) {
  for (int s = kLnLanes / 2; s > 0; s /= 2)
    for (int i = 0; i < s; ++i) l[i] += l[i + s];
  return l[0];
}

// The row's mean and 1 / sqrt(var + eps), var the biased variance around the mean (two passes).
EMBER_HD inline void ln_stats(const float* x, int64_t c, float eps, float* mean, float* invstd) {
  float l[kLnLanes] = {};
  for (int64_t j0 = 0; j0 < c; j0 += kLnLanes)
    for (int i = 0; i < kLnLanes; ++i)
      if (j0 + i < c) l[i] += x[j0 + i];
  const float m = ln_fold(l) / static_cast<float>(c);
  float v[kLnLanes] = {};
  for (int64_t j0 = 0; j0 < c; j0 += kLnLanes)
    for (int i = 0; i < kLnLanes; ++i)
      if (j0 + i < c) {
        const float d = x[j0 + i] - m;
        v[i] += d * d;
      }
  *mean = m;
  *invstd = 1.0f / sqrtf(ln_fold(v) / static_cast<float>(c) + eps);
}

// y = (x - mean) invstd gamma + beta.
EMBER_HD inline void ln_forward_row(const float* x, const float* gamma, const float* beta, int64_t c, float mean,
                                    float invstd, float* y) {
  for (int64_t j = 0; j < c; ++j) y[j] = (x[j] - mean) * invstd * gamma[j] + beta[j];
}

// dx = invstd (g - mean(g) - xhat mean(g xhat)), g = dy gamma, xhat = (x - mean) invstd.
EMBER_HD inline void ln_backward_row(const float* x, const float* dy, const float* gamma, int64_t c, float mean,
                                     float invstd, float* dx) {
  float a[kLnLanes] = {}, b[kLnLanes] = {};
  for (int64_t j0 = 0; j0 < c; j0 += kLnLanes)
    for (int i = 0; i < kLnLanes; ++i)
      if (j0 + i < c) {
        const int64_t j = j0 + i;
        const float g = dy[j] * gamma[j];
        a[i] += g;
        b[i] += g * ((x[j] - mean) * invstd);
      }
  const float ma = ln_fold(a) / static_cast<float>(c), mb = ln_fold(b) / static_cast<float>(c);
  for (int64_t j = 0; j < c; ++j) dx[j] = invstd * (dy[j] * gamma[j] - ma - (x[j] - mean) * invstd * mb);
}

}  // namespace ember::detail
