// ReLU kernels: plain loops the compiler vectorises, split across the OpenMP pool.
#include "relu.h"

#include "../../core/error.h"

namespace ember::cpu {

namespace {
void check_same(const Tensor& a, const Tensor& b, const char* what) {
  EMBER_CHECK(a.shape() == b.shape() && a.layout() == b.layout() && a.dtype() == DType::F32 &&
                  b.dtype() == DType::F32 && a.device().is_cpu() && b.device().is_cpu(),
              ShapeError, std::string("relu (cpu): ") + what + ": " + a.str() + " vs " + b.str());
}
}  // namespace

void relu_forward(const Tensor& x, Tensor& y) {
  check_same(x, y, "input and output must match");
  const float* in = x.f32();
  float* out = y.f32();
  const int64_t n = x.numel();
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) out[i] = in[i] > 0.0f ? in[i] : 0.0f;
}

void relu_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  check_same(y, dy, "output and output gradient must match");
  check_same(dy, dx, "output gradient and input gradient must match");
  const float* out = y.f32();
  const float* g = dy.f32();
  float* d = dx.f32();
  const int64_t n = y.numel();
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) d[i] = out[i] > 0.0f ? g[i] : 0.0f;
}

}  // namespace ember::cpu
