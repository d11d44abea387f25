// Losses and metrics on the CPU: a row at a time with the shared formulas (layers/losses_math.h),
// sums in double (as softmax_xent.cpp).
#include "losses.h"

#include <cmath>

#include "../../core/error.h"
#include "../losses_math.h"

namespace ember::cpu {

namespace {
void check_pair(const Tensor& z, const Tensor& t, const char* what) {
  EMBER_CHECK(z.dtype() == DType::F32 && z.layout() == Layout::RowMajor && z.device().is_cpu() && z.rank() >= 1,
              ShapeError, std::string(what) + " (cpu): outputs must be f32 (N, ...) row-major on cpu, got " + z.str());
  EMBER_CHECK(t.dtype() == DType::F32 && t.shape() == z.shape() && t.device().is_cpu(), ShapeError,
              std::string(what) + " (cpu): targets must be f32 " + z.shape().str() + " on cpu, got " + t.str());
}

void check_grad(const Tensor& z, const Tensor& dz) {
  EMBER_CHECK(dz.shape() == z.shape() && dz.dtype() == DType::F32 && dz.device().is_cpu(), ShapeError,
              "loss (cpu): the gradient must be f32 " + z.shape().str() + " on cpu, got " + dz.str());
}

double* slots(Tensor& sums, int64_t slot) {
  EMBER_CHECK(
      sums.dtype() == DType::F64 && sums.device().is_cpu() && slot >= 0 && slot < sums.numel() && sums.numel() >= 4,
      ShapeError, "metric sums (cpu): slot " + std::to_string(slot) + " of " + sums.str());
  return sums.data<double>();
}

void add_loss(Tensor& sums, double total) {
  double* acc = slots(sums, 3);
  acc[0] += total;
  if (std::isfinite(acc[0])) acc[3] += 1.0;  // batches before the first non-finite loss
}

int64_t per_row(const Tensor& z) { return z.dim(0) > 0 ? z.numel() / z.dim(0) : 0; }
}  // namespace

void point_loss_accumulate(detail::PointLoss f, float param, const Tensor& z, const Tensor& t, Tensor& sums) {
  check_pair(z, t, "loss");
  const int64_t n = z.dim(0), per = per_row(z);
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += detail::point_row(f, param, z.f32() + i * per, t.f32() + i * per, per);
  add_loss(sums, total);
}

void point_loss_backward(detail::PointLoss f, float param, const Tensor& z, const Tensor& t, Tensor& dz,
                         int64_t mean_rows) {
  check_pair(z, t, "loss");
  check_grad(z, dz);
  // One factor per element: the mean over the sample's elements, then over mean_rows samples.
  const float scale = static_cast<float>(1.0 / (static_cast<double>(per_row(z)) * static_cast<double>(mean_rows)));
  const float* zp = z.f32();
  const float* tp = t.f32();
  float* d = dz.f32();
  for (int64_t e = 0; e < z.numel(); ++e) d[e] = detail::point_grad(f, param, zp[e], tp[e]) * scale;
}

void categorical_xent_accumulate(float smoothing, const Tensor& z, const Tensor& t, Tensor& probs, Tensor& sums) {
  check_pair(z, t, "categorical cross-entropy");
  EMBER_CHECK(
      z.rank() == 2 && probs.shape() == z.shape() && probs.dtype() == DType::F32 && probs.device().is_cpu(), ShapeError,
      "categorical cross-entropy (cpu): outputs (N, K) and probs of their shape, got " + z.str() + ", " + probs.str());
  const int64_t n = z.dim(0), k = z.dim(1);
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i)
    total += detail::categorical_row(smoothing, z.f32() + i * k, t.f32() + i * k, probs.f32() + i * k, k);
  add_loss(sums, total);
}

void categorical_xent_backward(float smoothing, const Tensor& probs, const Tensor& t, Tensor& dz, int64_t mean_rows) {
  check_pair(probs, t, "categorical cross-entropy");
  check_grad(probs, dz);
  const int64_t n = probs.dim(0), k = probs.rank() == 2 ? probs.dim(1) : 0;
  const float scale = 1.0f / static_cast<float>(mean_rows);
  for (int64_t i = 0; i < n; ++i)
    detail::categorical_row_grad(smoothing, probs.f32() + i * k, t.f32() + i * k, dz.f32() + i * k, k, scale);
}

void metric_accumulate(detail::MetricKind m, float param, const Tensor& z, const Tensor& t, Tensor& sums,
                       int64_t slot) {
  EMBER_CHECK(z.dtype() == DType::F32 && z.layout() == Layout::RowMajor && z.device().is_cpu() && z.rank() >= 1,
              ShapeError, "metric (cpu): outputs must be f32 (N, ...) row-major on cpu, got " + z.str());
  double* acc = slots(sums, slot);
  const int64_t n = z.dim(0), per = per_row(z);
  const bool sparse = m == detail::MetricKind::SparseAccuracy || m == detail::MetricKind::SparseTopK;
  if (sparse)
    EMBER_CHECK(z.rank() == 2 && t.dtype() == DType::I32 && t.shape() == Shape{n} && t.device().is_cpu(), ShapeError,
                "metric (cpu): sparse metrics take outputs (N, K) and labels i32 (N), got " + z.str() + ", " + t.str());
  else
    check_pair(z, t, "metric");
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i)
    total += sparse ? detail::metric_row(m, param, z.f32() + i * per, nullptr, t.data<int32_t>()[i], per)
                    : detail::metric_row(m, param, z.f32() + i * per, t.f32() + i * per, 0, per);
  acc[slot] += total;
}

}  // namespace ember::cpu
