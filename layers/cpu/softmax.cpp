// Row softmax: max-subtracted exponentials (no overflow), one row per iteration of the pool.
#include "softmax.h"

#include <algorithm>
#include <cmath>

#include "../../core/error.h"
#include "../losses_math.h"

namespace ember::cpu {

namespace {
void check_rows(const Tensor& t, const Shape& s, const char* what) {
  EMBER_CHECK(t.rank() == 2 && t.shape() == s && t.layout() == Layout::RowMajor && t.dtype() == DType::F32 &&
                  t.device().is_cpu(),
              ShapeError,
              std::string("softmax (cpu): ") + what + " must be f32 row-major " + s.str() + ", got " + t.str());
}
}  // namespace

void softmax_forward(const Tensor& x, Tensor& y) {
  check_rows(x, x.shape(), "input");
  check_rows(y, x.shape(), "output");
  const int64_t n = x.dim(0), k = x.dim(1);
  const float* in = x.f32();
  float* out = y.f32();
#pragma omp parallel for schedule(static) if (n * k > 32768)
  for (int64_t r = 0; r < n; ++r) {
    const float* xi = in + r * k;
    float* yi = out + r * k;
    int64_t best = 0;
    detail::softmax_row(xi, yi, k, &best);
  }
}

void softmax_backward(const Tensor& y, const Tensor& dy, Tensor& dx) {
  check_rows(y, y.shape(), "output");
  check_rows(dy, y.shape(), "output gradient");
  check_rows(dx, y.shape(), "input gradient");
  const int64_t n = y.dim(0), k = y.dim(1);
  const float* out = y.f32();
  const float* g = dy.f32();
  float* d = dx.f32();
#pragma omp parallel for schedule(static) if (n * k > 32768)
  for (int64_t r = 0; r < n; ++r) {
    const float* yi = out + r * k;
    const float* gi = g + r * k;
    double dot = 0;
    for (int64_t j = 0; j < k; ++j) dot += static_cast<double>(gi[j]) * yi[j];
    const float s = static_cast<float>(dot);
    float* di = d + r * k;
    for (int64_t j = 0; j < k; ++j) di[j] = yi[j] * (gi[j] - s);
  }
}

}  // namespace ember::cpu
