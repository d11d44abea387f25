// The elementwise activations' formulas that need more than one line, shared by the CPU loops
// (layers/cpu/pointwise.cpp) and the CUDA kernels (layers/cuda/pointwise.cu) so the two compute
// the same expressions in the same order: GELU, exact and tanh-approximated. Private to the
// library.
#pragma once

#include <math.h>

#include "host_device.h"

namespace ember::detail {

inline constexpr float kGeluRsqrt2 = 0.707106781186547524f;       // 1 / sqrt(2)
inline constexpr float kGeluRsqrt2Pi = 0.398942280401432678f;     // 1 / sqrt(2 pi)
inline constexpr float kGeluSqrt2OverPi = 0.797884560802865356f;  // sqrt(2 / pi)
inline constexpr float kGeluCubic = 0.044715f;                    // the tanh form's cubic coefficient

// GELU: x Phi(x) = x (1 + erf(x / sqrt(2))) / 2, Phi the standard normal distribution function
// (Keras' gelu(approximate=False), PyTorch's GELU()).
EMBER_HD inline float gelu(float x) { return 0.5f * x * (1.0f + erff(x * kGeluRsqrt2)); }

// Its derivative: Phi(x) + x phi(x), phi the standard normal density.
EMBER_HD inline float gelu_grad(float x) {
  return 0.5f * (1.0f + erff(x * kGeluRsqrt2)) + x * kGeluRsqrt2Pi * expf(-0.5f * x * x);
}

// The tanh approximation: x (1 + tanh(u)) / 2, u = sqrt(2 / pi) (x + 0.044715 x^3) (Keras'
// gelu(approximate=True), PyTorch's GELU(approximate="tanh"), GPT-2's).
EMBER_HD inline float gelu_tanh(float x) {
  const float t = tanhf(kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x));
  return 0.5f * x * (1.0f + t);
}

// Its derivative: (1 + t) / 2 + x (1 - t^2) u'(x) / 2, u'(x) = sqrt(2 / pi) (1 + 3 0.044715 x^2).
// Where tanh has saturated (1 - t^2 = 0 in float: |x| > 5.2 or so) the second term is 0, also
// where x^2 would overflow and make it 0 * inf (so GELU'(+-inf) is 1 and 0 here, NaN in the exact
// form, as in PyTorch).
EMBER_HD inline float gelu_tanh_grad(float x) {
  const float t = tanhf(kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x));
  const float sech2 = 1.0f - t * t;
  const float slope = sech2 == 0.0f ? 0.0f : 0.5f * x * sech2 * kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * (1.0f + t) + slope;
}

}  // namespace ember::detail
