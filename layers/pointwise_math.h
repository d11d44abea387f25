// The elementwise activations' formulas that need more than one line, shared by the CPU loops
// (layers/cpu/pointwise.cpp) and the CUDA kernels (layers/cuda/pointwise.cu) so the two compute
// the same expressions in the same order: GELU, exact and tanh-approximated. Private to the
// library.
#pragma once

#include <math.h>
#include <string.h>

#include <cstdint>

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

// exp(x) in float without libm, so that a loop of it vectorises (Cephes' expf: x = n ln 2 + r,
// ln 2 in two parts, a degree-7 polynomial for exp(r), |r| <= ln 2 / 2, times 2^n built from its
// bits): within 2 ulp of expf. x is clamped to [-87.34, 88.38], where 2^n stays a normal float
// (exp of less is ~1e-38, not 0); a NaN stays NaN.
EMBER_HD inline float exp_poly(float x) {
  x = x > 88.3762626647949f ? 88.3762626647949f : x;
  x = x < -87.3365447504019f ? -87.3365447504019f : x;
  const float n = floorf(x * 1.44269504088896341f + 0.5f);
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n == n ? n : 0.0f) + 127) * (int32_t{1} << 23);  // NaN: y is NaN
  float scale;
  memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

// tanh(u) = sign(u) (1 - e) / (1 + e), e = exp(-2 |u|) (exp_poly): within a few ulp of tanhf in
// absolute terms, +-1 exactly once e is below half an ulp of 1 (|u| > 9), 0 at 0; a NaN stays NaN.
EMBER_HD inline float tanh_poly(float u) {
  const float a = u < 0.0f ? -u : u;
  const float e = exp_poly(-2.0f * a);
  const float t = (1.0f - e) / (1.0f + e);
  return u < 0.0f ? -t : t;
}

// The tanh approximation: x (1 + tanh(u)) / 2, u = sqrt(2 / pi) (x + 0.044715 x^3) (Keras'
// gelu(approximate=True), PyTorch's GELU(approximate="tanh"), GPT-2's).
EMBER_HD inline float gelu_tanh(float x) {
  const float t = tanh_poly(kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x));
  return 0.5f * x * (1.0f + t);
}

// Its derivative: (1 + t) / 2 + x (1 - t^2) u'(x) / 2, u'(x) = sqrt(2 / pi) (1 + 3 0.044715 x^2).
// Where tanh has saturated (1 - t^2 = 0 in float: |x| > 5.2 or so) the second term is 0, also
// where x^2 would overflow and make it 0 * inf (so GELU'(+-inf) is 1 and 0 here, NaN in the exact
// form, as in PyTorch).
EMBER_HD inline float gelu_tanh_grad(float x) {
  const float t = tanh_poly(kGeluSqrt2OverPi * (x + kGeluCubic * x * x * x));
  const float sech2 = 1.0f - t * t;
  const float slope = sech2 == 0.0f ? 0.0f : 0.5f * x * sech2 * kGeluSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
  return 0.5f * (1.0f + t) + slope;
}

}  // namespace ember::detail
