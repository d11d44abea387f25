// Layer normalisation on the CPU: a row per iteration across the OpenMP pool (the row formulas in
// layers/layernorm_math.h), the parameter gradients per group of rows then the pairwise tree.
#include "layernorm.h"

#include <algorithm>

#include "../../core/error.h"
#include "../../core/pairwise_sum.h"
#include "../layernorm_math.h"

namespace ember::cpu {

namespace {
void check_f32(const Tensor& t, const Shape& shape, const char* what) {
  EMBER_CHECK(t.shape() == shape && t.dtype() == DType::F32 && t.device().is_cpu() && t.layout() == Layout::RowMajor,
              ShapeError,
              std::string("layer normalization (cpu): ") + what + " must be f32 row-major " + shape.str() +
                  " on the cpu, got " + t.str());
}

// Rows and features of x, after checking every tensor of the call.
std::pair<int64_t, int64_t> check(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                                  const Tensor& invstd) {
  EMBER_CHECK(x.rank() >= 1 && x.numel() > 0, ShapeError,
              "layer normalization (cpu): expects input (..., features), got " + x.str());
  const int64_t c = x.dim(x.rank() - 1), r = x.numel() / c;
  check_f32(x, x.shape(), "the input");
  check_f32(gamma, Shape{c}, "gamma");
  check_f32(beta, Shape{c}, "beta");
  check_f32(mean, Shape{r}, "the saved mean");
  check_f32(invstd, Shape{r}, "the saved inverse deviation");
  return {r, c};
}
}  // namespace

void layernorm_forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& y, Tensor& mean,
                       Tensor& invstd) {
  const auto [r, c] = check(x, gamma, beta, mean, invstd);
  check_f32(y, x.shape(), "the output");
  const float *xp = x.f32(), *gp = gamma.f32(), *bp = beta.f32();
  float *yp = y.f32(), *mp = mean.f32(), *ip = invstd.f32();
#pragma omp parallel for schedule(static) if (r * c > 32768)
  for (int64_t i = 0; i < r; ++i) {
    detail::ln_stats(xp + i * c, c, eps, mp + i, ip + i);
    detail::ln_forward_row(xp + i * c, gp, bp, c, mp[i], ip[i], yp + i * c);
  }
}

void layernorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& invstd, Tensor* dx, Tensor& dgamma, Tensor& dbeta, Tensor& scratch) {
  const auto [r, c] = check(x, gamma, gamma, mean, invstd);
  check_f32(dy, x.shape(), "the output gradient");
  check_f32(dgamma, Shape{c}, "dgamma");
  check_f32(dbeta, Shape{c}, "dbeta");
  if (dx) check_f32(*dx, x.shape(), "the input gradient");
  const int64_t groups = batch_groups(r), part = 2 * c;  // a group's dgamma then dbeta
  ensure(scratch, Shape{std::max<int64_t>(groups, 1) * part}, DType::F32, Device::cpu());
  const float *xp = x.f32(), *gp = dy.f32(), *wp = gamma.f32(), *mp = mean.f32(), *ip = invstd.f32();
  float* parts = scratch.f32();
  float* dxp = dx ? dx->f32() : nullptr;
#pragma omp parallel for schedule(static) if (r * c > 32768)
  for (int64_t j = 0; j < groups; ++j) {
    float* pg = parts + j * part;
    float* pb = pg + c;
    std::fill(pg, pg + part, 0.0f);
    for (int64_t i = j * kBatchGroupRows; i < std::min(r, (j + 1) * kBatchGroupRows); ++i) {
      const float *xi = xp + i * c, *gi = gp + i * c;
      const float m = mp[i], s = ip[i];
      for (int64_t k = 0; k < c; ++k) {
        pg[k] += gi[k] * ((xi[k] - m) * s);
        pb[k] += gi[k];
      }
      if (dxp) detail::ln_backward_row(xi, gi, wp, c, m, s, dxp + i * c);
    }
  }
  if (groups == 0) {
    dgamma.fill(0.0f);
    dbeta.fill(0.0f);
    return;
  }
  pairwise_reduce(parts, groups, part, part);
  std::copy(parts, parts + c, dgamma.f32());
  std::copy(parts + c, parts + part, dbeta.f32());
}

}  // namespace ember::cpu
