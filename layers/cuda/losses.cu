// Loss and metric kernels: a thread per row computes the row's value with the CPU's formulas
// (layers/losses_math.h) into scratch, then one block adds the rows in a fixed order (the same
// sum every run, as softmax_xent.cu). Gradients: a thread per element (point losses) or per row.
#include "../../core/cuda/check.h"
#include "../losses_math.h"
#include "block_sum.cuh"
#include "losses.h"

namespace ember::cuda {

namespace {
constexpr int kThreads = 256;
using ::ember::detail::MetricKind;
using ::ember::detail::PointLoss;

unsigned blocks(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 4096)));
}

__global__ void point_rows(PointLoss f, float param, const float* __restrict__ z, const float* __restrict__ t,
                           double* __restrict__ rows, int64_t n, int64_t per) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    rows[i] = ::ember::detail::point_row(f, param, z + i * per, t + i * per, per);
}

__global__ void point_grad(PointLoss f, float param, const float* __restrict__ z, const float* __restrict__ t,
                           float* __restrict__ d, int64_t total, float scale) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x)
    d[e] = ::ember::detail::point_grad(f, param, z[e], t[e]) * scale;
}

__global__ void categorical_rows(float smoothing, const float* __restrict__ z, const float* __restrict__ t,
                                 float* __restrict__ p, double* __restrict__ rows, int64_t n, int64_t k) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    rows[i] = ::ember::detail::categorical_row(smoothing, z + i * k, t + i * k, p + i * k, k);
}

__global__ void categorical_grad(float smoothing, const float* __restrict__ p, const float* __restrict__ t,
                                 float* __restrict__ d, int64_t n, int64_t k, float scale) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    ::ember::detail::categorical_row_grad(smoothing, p + i * k, t + i * k, d + i * k, k, scale);
}

__global__ void metric_rows(MetricKind m, float param, const float* __restrict__ z, const float* __restrict__ t,
                            const int32_t* __restrict__ labels, double* __restrict__ rows, int64_t n, int64_t per) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    rows[i] = labels ? ::ember::detail::metric_row(m, param, z + i * per, nullptr, labels[i], per)
                     : ::ember::detail::metric_row(m, param, z + i * per, t + i * per, 0, per);
}

// acc[slot] += the rows' sum, in a fixed order; `count_finite`: the loss slot's batch count
// (MetricSums: acc[3] += 1 while acc[0] is finite).
__global__ void add_rows(const double* __restrict__ rows, int64_t n, double* __restrict__ acc, int64_t slot,
                         bool count_finite) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += rows[i];
  const double total = block_sum<kThreads>(s);
  if (threadIdx.x == 0) {
    acc[slot] += total;
    if (count_finite && isfinite(acc[0])) acc[3] += 1.0;
  }
}

void check_pair(const Tensor& z, const Tensor& t, const Context& ctx, const char* what) {
  const Device d = Device::cuda(ctx.device());
  EMBER_CHECK(z.dtype() == DType::F32 && z.layout() == Layout::RowMajor && z.device() == d && z.rank() >= 1, ShapeError,
              std::string(what) + " (cuda): outputs must be f32 (N, ...) row-major on " + d.str() + ", got " + z.str());
  EMBER_CHECK(
      t.dtype() == DType::F32 && t.shape() == z.shape() && t.device() == d, ShapeError,
      std::string(what) + " (cuda): targets must be f32 " + z.shape().str() + " on " + d.str() + ", got " + t.str());
}

void check_same(const Tensor& z, const Tensor& out, const char* what) {
  EMBER_CHECK(out.shape() == z.shape() && out.dtype() == DType::F32 && out.device() == z.device(), ShapeError,
              std::string("loss (cuda): ") + what + " must be f32 " + z.shape().str() + " on " + z.device().str() +
                  ", got " + out.str());
}

double* slots(Tensor& sums, const Tensor& z, int64_t slot) {
  EMBER_CHECK(sums.dtype() == DType::F64 && sums.device() == z.device() && sums.numel() >= 4 && slot >= 0 &&
                  slot < sums.numel(),
              ShapeError, "metric sums (cuda): slot " + std::to_string(slot) + " of " + sums.str());
  return static_cast<double*>(sums.raw());
}

// Scratch for n doubles through the caching allocator (the same size every step: reused).
Tensor row_scratch(int64_t n, const Tensor& like) { return Tensor::empty(Shape{2 * n}, DType::F32, like.device()); }

// A tensor's device address as the kernels take it.
const float* in(const Tensor& t) { return static_cast<const float*>(t.raw()); }
float* out(Tensor& t) { return static_cast<float*>(t.raw()); }

int64_t per_row(const Tensor& z) { return z.dim(0) > 0 ? z.numel() / z.dim(0) : 0; }
}  // namespace

void point_loss_accumulate(Context& ctx, PointLoss f, float param, const Tensor& z, const Tensor& t, Tensor& sums) {
  check_pair(z, t, ctx, "loss");
  double* acc = slots(sums, z, 3);
  const int64_t n = z.dim(0), per = per_row(z);
  if (n == 0) return;
  Tensor scratch = row_scratch(n, z);
  auto* rows = static_cast<double*>(scratch.raw());
  point_rows<<<blocks(n), kThreads, 0, ctx.stream()>>>(f, param, in(z), in(t), rows, n, per);
  EMBER_CUDA_CHECK(cudaGetLastError());
  add_rows<<<1, kThreads, 0, ctx.stream()>>>(rows, n, acc, 0, true);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void point_loss_backward(Context& ctx, PointLoss f, float param, const Tensor& z, const Tensor& t, Tensor& dz,
                         int64_t mean_rows) {
  check_pair(z, t, ctx, "loss");
  check_same(z, dz, "the gradient");
  if (z.numel() == 0) return;
  const float scale = static_cast<float>(1.0 / (static_cast<double>(per_row(z)) * static_cast<double>(mean_rows)));
  point_grad<<<blocks(z.numel()), kThreads, 0, ctx.stream()>>>(f, param, in(z), in(t), out(dz), z.numel(), scale);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void categorical_xent_accumulate(Context& ctx, float smoothing, const Tensor& z, const Tensor& t, Tensor& probs,
                                 Tensor& sums) {
  check_pair(z, t, ctx, "categorical cross-entropy");
  EMBER_CHECK(z.rank() == 2, ShapeError, "categorical cross-entropy (cuda): outputs must be (N, K), got " + z.str());
  check_same(z, probs, "probs");
  double* acc = slots(sums, z, 3);
  const int64_t n = z.dim(0), k = z.dim(1);
  if (n == 0) return;
  Tensor scratch = row_scratch(n, z);
  auto* rows = static_cast<double*>(scratch.raw());
  categorical_rows<<<blocks(n), kThreads, 0, ctx.stream()>>>(smoothing, in(z), in(t), out(probs), rows, n, k);
  EMBER_CUDA_CHECK(cudaGetLastError());
  add_rows<<<1, kThreads, 0, ctx.stream()>>>(rows, n, acc, 0, true);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void categorical_xent_backward(Context& ctx, float smoothing, const Tensor& probs, const Tensor& t, Tensor& dz,
                               int64_t mean_rows) {
  check_pair(probs, t, ctx, "categorical cross-entropy");
  check_same(probs, dz, "the gradient");
  const int64_t n = probs.dim(0), k = probs.rank() == 2 ? probs.dim(1) : 0;
  if (n == 0) return;
  categorical_grad<<<blocks(n), kThreads, 0, ctx.stream()>>>(smoothing, in(probs), in(t), out(dz), n, k,
                                                             1.0f / static_cast<float>(mean_rows));
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void metric_accumulate(Context& ctx, MetricKind m, float param, const Tensor& z, const Tensor& t, Tensor& sums,
                       int64_t slot) {
  const Device d = Device::cuda(ctx.device());
  const bool sparse = m == MetricKind::SparseAccuracy || m == MetricKind::SparseTopK;
  if (sparse)
    EMBER_CHECK(z.dtype() == DType::F32 && z.layout() == Layout::RowMajor && z.rank() == 2 && z.device() == d &&
                    t.dtype() == DType::I32 && t.shape() == Shape{z.dim(0)} && t.device() == d,
                ShapeError,
                "metric (cuda): sparse metrics take outputs f32 (N, K) and labels i32 (N) on " + d.str() + ", got " +
                    z.str() + ", " + t.str());
  else
    check_pair(z, t, ctx, "metric");
  double* acc = slots(sums, z, slot);
  const int64_t n = z.dim(0), per = per_row(z);
  if (n == 0) return;
  Tensor scratch = row_scratch(n, z);
  auto* rows = static_cast<double*>(scratch.raw());
  metric_rows<<<blocks(n), kThreads, 0, ctx.stream()>>>(
      m, param, in(z), sparse ? nullptr : in(t), sparse ? static_cast<const int32_t*>(t.raw()) : nullptr, rows, n, per);
  EMBER_CUDA_CHECK(cudaGetLastError());
  add_rows<<<1, kThreads, 0, ctx.stream()>>>(rows, n, acc, slot, false);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
