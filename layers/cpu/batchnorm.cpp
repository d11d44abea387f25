// Batch normalisation over (M rows, C channels): NHWC puts the channels innermost, so every
// pass runs over contiguous floats. Per-channel sums go through fixed blocks of kRows rows
// (summed in double, then added in block order): the same bits at any thread count.
#include "batchnorm.h"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <vector>

#include "../../core/error.h"

namespace ember::cpu {

namespace {
constexpr int64_t kRows = 256;

struct Rows {
  int64_t m = 0, c = 0;
};

Rows rows_of(const Tensor& x) {
  EMBER_CHECK(x.dtype() == DType::F32 && x.device().is_cpu() &&
                  ((x.rank() == 4 && x.layout() == Layout::NHWC) || (x.rank() == 2 && x.layout() == Layout::RowMajor)),
              ShapeError, "batchnorm (cpu): input must be f32 NHWC (N, C, H, W) or row-major (N, F), got " + x.str());
  return x.rank() == 4 ? Rows{x.dim(0) * x.dim(2) * x.dim(3), x.dim(1)} : Rows{x.dim(0), x.dim(1)};
}

void check_like(const Tensor& t, const Tensor& x, const char* what) {
  EMBER_CHECK(t.shape() == x.shape() && t.layout() == x.layout() && t.dtype() == DType::F32 && t.device().is_cpu(),
              ShapeError, std::string("batchnorm (cpu): ") + what + " must be like " + x.str() + ", got " + t.str());
}

void check_channels(const Tensor& t, int64_t c, const char* what) {
  EMBER_CHECK(
      t.numel() == c && t.dtype() == DType::F32 && t.device().is_cpu(), ShapeError,
      std::string("batchnorm (cpu): ") + what + " must hold " + std::to_string(c) + " f32 values, got " + t.str());
}

// out[ch] = sum over rows of f(row, ch), for two sums at once; f(row pointer offset, ch, &s0, &s1).
template <class F>
void channel_sums(Rows r, std::vector<double>& s0, std::vector<double>& s1, F f) {
  const int64_t blocks = (r.m + kRows - 1) / kRows;
  std::vector<double> part(static_cast<size_t>(blocks * r.c * 2), 0.0);
#pragma omp parallel for schedule(static) if (r.m * r.c > 32768)
  for (int64_t b = 0; b < blocks; ++b) {
    double* p0 = part.data() + b * r.c * 2;
    double* p1 = p0 + r.c;
    const int64_t end = std::min(r.m, (b + 1) * kRows);
    for (int64_t row = b * kRows; row < end; ++row) f(row * r.c, p0, p1);
  }
  s0.assign(static_cast<size_t>(r.c), 0.0);
  s1.assign(static_cast<size_t>(r.c), 0.0);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t ch = 0; ch < r.c; ++ch) {
      s0[ch] += part[(b * r.c * 2) + ch];
      s1[ch] += part[(b * r.c * 2) + r.c + ch];
    }
}

// y = x * a + b per channel.
void scale_shift(Rows r, const float* x, const std::vector<float>& a, const std::vector<float>& b, float* y) {
  const float* pa = a.data();
  const float* pb = b.data();
#pragma omp parallel for schedule(static) if (r.m * r.c > 32768)
  for (int64_t row = 0; row < r.m; ++row) {
    const float* xi = x + row * r.c;
    float* yi = y + row * r.c;
#pragma omp simd
    for (int64_t ch = 0; ch < r.c; ++ch) yi[ch] = xi[ch] * pa[ch] + pb[ch];
  }
}
}  // namespace

void batchnorm_forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, float factor, float eps,
                                Tensor& y, Tensor& running_mean, Tensor& running_var, Tensor& save_mean,
                                Tensor& save_invstd) {
  const Rows r = rows_of(x);
  check_like(y, x, "output");
  for (const Tensor* t :
       std::initializer_list<const Tensor*>{&gamma, &beta, &running_mean, &running_var, &save_mean, &save_invstd})
    check_channels(*t, r.c, "a per-channel tensor");
  EMBER_CHECK(r.m > 0, ShapeError, "batchnorm (cpu): training needs at least one row, got " + x.str());
  const float* in = x.f32();
  const int64_t c = r.c;
  std::vector<double> sum, unused;
  channel_sums(r, sum, unused, [&](int64_t off, double* s, double*) {
    for (int64_t ch = 0; ch < c; ++ch) s[ch] += in[off + ch];
  });
  std::vector<float> mean(static_cast<size_t>(c));
  for (int64_t ch = 0; ch < c; ++ch) mean[ch] = static_cast<float>(sum[ch] / static_cast<double>(r.m));
  std::vector<double> sq;
  channel_sums(r, sq, unused, [&](int64_t off, double* s, double*) {
    for (int64_t ch = 0; ch < c; ++ch) {
      const double d = static_cast<double>(in[off + ch]) - mean[ch];
      s[ch] += d * d;
    }
  });
  std::vector<float> a(static_cast<size_t>(c)), b(static_cast<size_t>(c));
  const float* gm = gamma.f32();
  const float* bt = beta.f32();
  float* rm = running_mean.f32();
  float* rv = running_var.f32();
  for (int64_t ch = 0; ch < c; ++ch) {
    const double var = sq[ch] / static_cast<double>(r.m);
    const float invstd = static_cast<float>(1.0 / std::sqrt(var + static_cast<double>(eps)));
    save_mean.f32()[ch] = mean[ch];
    save_invstd.f32()[ch] = invstd;
    a[ch] = gm[ch] * invstd;
    b[ch] = bt[ch] - mean[ch] * a[ch];
    const double unbiased = r.m > 1 ? sq[ch] / static_cast<double>(r.m - 1) : var;
    rm[ch] = (1.0f - factor) * rm[ch] + factor * mean[ch];
    rv[ch] = (1.0f - factor) * rv[ch] + factor * static_cast<float>(unbiased);
  }
  scale_shift(r, in, a, b, y.f32());
}

void batchnorm_forward_inference(const Tensor& x, const Tensor& gamma, const Tensor& beta, const Tensor& running_mean,
                                 const Tensor& running_var, float eps, Tensor& y) {
  const Rows r = rows_of(x);
  check_like(y, x, "output");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&gamma, &beta, &running_mean, &running_var})
    check_channels(*t, r.c, "a per-channel tensor");
  std::vector<float> a(static_cast<size_t>(r.c)), b(static_cast<size_t>(r.c));
  for (int64_t ch = 0; ch < r.c; ++ch) {
    const float invstd =
        static_cast<float>(1.0 / std::sqrt(static_cast<double>(running_var.f32()[ch]) + static_cast<double>(eps)));
    a[ch] = gamma.f32()[ch] * invstd;
    b[ch] = beta.f32()[ch] - running_mean.f32()[ch] * a[ch];
  }
  scale_shift(r, x.f32(), a, b, y.f32());
}

void batchnorm_backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& save_mean,
                        const Tensor& save_invstd, Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
  const Rows r = rows_of(x);
  check_like(dy, x, "output gradient");
  check_like(dx, x, "input gradient");
  for (const Tensor* t : std::initializer_list<const Tensor*>{&gamma, &save_mean, &save_invstd, &dgamma, &dbeta})
    check_channels(*t, r.c, "a per-channel tensor");
  const float* in = x.f32();
  const float* g = dy.f32();
  const float* mean = save_mean.f32();
  const int64_t c = r.c;
  std::vector<double> sum_dy, sum_dy_xc;  // sum(dy), sum(dy * (x - mean))
  channel_sums(r, sum_dy, sum_dy_xc, [&](int64_t off, double* s0, double* s1) {
    for (int64_t ch = 0; ch < c; ++ch) {
      s0[ch] += g[off + ch];
      s1[ch] += static_cast<double>(g[off + ch]) * (static_cast<double>(in[off + ch]) - mean[ch]);
    }
  });
  // dx = gamma invstd (dy - dbeta / M - (x - mean) invstd dgamma / M) = dy k + (x - mean) k2 + k3.
  std::vector<float> k(static_cast<size_t>(c)), k2(static_cast<size_t>(c)), k3(static_cast<size_t>(c));
  const double m = static_cast<double>(r.m);
  for (int64_t ch = 0; ch < c; ++ch) {
    const double invstd = save_invstd.f32()[ch];
    const double dg = sum_dy_xc[ch] * invstd;
    dgamma.f32()[ch] = static_cast<float>(dg);
    dbeta.f32()[ch] = static_cast<float>(sum_dy[ch]);
    const double kk = static_cast<double>(gamma.f32()[ch]) * invstd;
    k[ch] = static_cast<float>(kk);
    k2[ch] = static_cast<float>(-kk * invstd * dg / m);
    k3[ch] = static_cast<float>(-kk * sum_dy[ch] / m);
  }
  float* d = dx.f32();
  const float* pk = k.data();
  const float* pk2 = k2.data();
  const float* pk3 = k3.data();
#pragma omp parallel for schedule(static) if (r.m * r.c > 32768)
  for (int64_t row = 0; row < r.m; ++row) {
    const int64_t off = row * c;
#pragma omp simd
    for (int64_t ch = 0; ch < c; ++ch)
      d[off + ch] = g[off + ch] * pk[ch] + (in[off + ch] - mean[ch]) * pk2[ch] + pk3[ch];
  }
}

}  // namespace ember::cpu
