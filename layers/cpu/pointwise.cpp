// Sigmoid, tanh, LeakyReLU, GELU: plain loops split across the OpenMP pool (GELU's formulas in
// layers/pointwise_math.h, the CUDA kernels' too).
#include "pointwise.h"

#include <cmath>

#include "../../core/error.h"
#include "../pointwise_math.h"

namespace ember::cpu {

namespace {
void check_same(const Tensor& a, const Tensor& b, const char* what) {
  EMBER_CHECK(a.shape() == b.shape() && a.layout() == b.layout() && a.dtype() == DType::F32 &&
                  b.dtype() == DType::F32 && a.device().is_cpu() && b.device().is_cpu(),
              ShapeError, std::string("activation (cpu): ") + what + ": " + a.str() + " vs " + b.str());
}
}  // namespace

void pointwise_forward(detail::Pointwise f, float alpha, const Tensor& x, Tensor& y) {
  check_same(x, y, "input and output must match");
  const float* in = x.f32();
  float* out = y.f32();
  const int64_t n = x.numel();
  switch (f) {
    case detail::Pointwise::Sigmoid:
#pragma omp parallel for schedule(static) if (n > 32768)
      for (int64_t i = 0; i < n; ++i) out[i] = 1.0f / (1.0f + std::exp(-in[i]));
      break;
    case detail::Pointwise::Tanh:
#pragma omp parallel for schedule(static) if (n > 32768)
      for (int64_t i = 0; i < n; ++i) out[i] = std::tanh(in[i]);
      break;
    case detail::Pointwise::LeakyReLU:
#pragma omp parallel for simd schedule(static) if (n > 32768)
      for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.0f ? in[i] : alpha * in[i];
      break;
    case detail::Pointwise::Gelu:
#pragma omp parallel for schedule(static) if (n > 32768)
      for (int64_t i = 0; i < n; ++i) out[i] = detail::gelu(in[i]);
      break;
    case detail::Pointwise::GeluTanh:  // tanh_poly: no libm call, so the loop vectorises
#pragma omp parallel for simd schedule(static) if (n > 32768)
      for (int64_t i = 0; i < n; ++i) out[i] = detail::gelu_tanh(in[i]);
      break;
  }
}

void pointwise_backward(detail::Pointwise f, float alpha, const Tensor& x, const Tensor& y, const Tensor& dy,
                        Tensor& dx) {
  check_same(x, y, "input and output must match");
  check_same(y, dy, "output and output gradient must match");
  check_same(dy, dx, "output gradient and input gradient must match");
  const float* in = x.f32();
  const float* out = y.f32();
  const float* g = dy.f32();
  float* d = dx.f32();
  const int64_t n = x.numel();
  switch (f) {
    case detail::Pointwise::Sigmoid:
#pragma omp parallel for simd schedule(static) if (n > 32768)
      for (int64_t i = 0; i < n; ++i) d[i] = g[i] * out[i] * (1.0f - out[i]);
      break;
    case detail::Pointwise::Tanh:
#pragma omp parallel for simd schedule(static) if (n > 32768)
      for (int64_t i = 0; i < n; ++i) d[i] = g[i] * (1.0f - out[i] * out[i]);
      break;
    case detail::Pointwise::LeakyReLU:
#pragma omp parallel for simd schedule(static) if (n > 32768)
      for (int64_t i = 0; i < n; ++i) d[i] = in[i] > 0.0f ? g[i] : alpha * g[i];
      break;
    case detail::Pointwise::Gelu:
#pragma omp parallel for schedule(static) if (n > 32768)
      for (int64_t i = 0; i < n; ++i) d[i] = g[i] * detail::gelu_grad(in[i]);
      break;
    case detail::Pointwise::GeluTanh:
#pragma omp parallel for simd schedule(static) if (n > 32768)
      for (int64_t i = 0; i < n; ++i) d[i] = g[i] * detail::gelu_tanh_grad(in[i]);
      break;
  }
}

}  // namespace ember::cpu
