// Layer normalisation kernels: a thread per row runs the CPU's row formulas
// (layers/layernorm_math.h); the parameter gradients as the CPU sums them, a thread per (group,
// feature) adding its group's rows in order, then a thread per feature adding the groups as the
// pairwise tree of core/pairwise_sum.h.
#include "../../core/cuda/check.h"
#include "../../core/pairwise_sum.h"
#include "../layernorm_math.h"
#include "layernorm.h"

namespace ember::cuda {

namespace {
constexpr int kThreads = 128;

const float* in(const Tensor& t) { return static_cast<const float*>(t.raw()); }
float* out(Tensor& t) { return static_cast<float*>(t.raw()); }

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 4096)));
}

__global__ void ln_forward(const float* __restrict__ x, const float* __restrict__ gamma, const float* __restrict__ beta,
                           float eps, float* __restrict__ y, float* __restrict__ mean, float* __restrict__ invstd,
                           int64_t r, int64_t c) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < r; i += int64_t(gridDim.x) * blockDim.x) {
    ::ember::detail::ln_stats(x + i * c, c, eps, mean + i, invstd + i);
    ::ember::detail::ln_forward_row(x + i * c, gamma, beta, c, mean[i], invstd[i], y + i * c);
  }
}

__global__ void ln_backward_rows(const float* __restrict__ x, const float* __restrict__ dy,
                                 const float* __restrict__ gamma, const float* __restrict__ mean,
                                 const float* __restrict__ invstd, float* __restrict__ dx, int64_t r, int64_t c) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < r; i += int64_t(gridDim.x) * blockDim.x)
    ::ember::detail::ln_backward_row(x + i * c, dy + i * c, gamma, c, mean[i], invstd[i], dx + i * c);
}

// parts[g][k] = sum over group g's rows of dy * xhat, parts[g][c + k] = of dy (rows ascending).
__global__ void ln_group_sums(const float* __restrict__ x, const float* __restrict__ dy, const float* __restrict__ mean,
                              const float* __restrict__ invstd, float* __restrict__ parts, int64_t r, int64_t c,
                              int64_t groups) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < groups * c;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t g = e / c, k = e % c;
    float sg = 0.0f, sb = 0.0f;
    const int64_t end = min(r, (g + 1) * ::ember::kBatchGroupRows);
    for (int64_t i = g * ::ember::kBatchGroupRows; i < end; ++i) {
      const float d = dy[i * c + k];
      sg += d * ((x[i * c + k] - mean[i]) * invstd[i]);
      sb += d;
    }
    parts[g * 2 * c + k] = sg;
    parts[g * 2 * c + c + k] = sb;
  }
}

// Per element of a part: the groups added as the pairwise tree (pairwise_reduce_range's loop),
// the sum written to dgamma / dbeta.
__global__ void ln_tree(float* __restrict__ parts, int64_t groups, int64_t c, float* __restrict__ dgamma,
                        float* __restrict__ dbeta) {
  const int64_t part = 2 * c;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < part; e += int64_t(gridDim.x) * blockDim.x) {
    for (int64_t s = 1; s < groups; s *= 2)
      for (int64_t j = 0; j + s < groups; j += 2 * s) parts[j * part + e] += parts[(j + s) * part + e];
    if (e < c)
      dgamma[e] = parts[e];
    else
      dbeta[e - c] = parts[e];
  }
}

void check_f32(const Tensor& t, const Shape& shape, const Device& d, const char* what) {
  EMBER_CHECK(t.shape() == shape && t.dtype() == DType::F32 && t.device() == d && t.layout() == Layout::RowMajor,
              ShapeError,
              std::string("layer normalization (cuda): ") + what + " must be f32 row-major " + shape.str() + " on " +
                  d.str() + ", got " + t.str());
}

std::pair<int64_t, int64_t> check(const Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& mean,
                                  const Tensor& invstd) {
  const Device d = Device::cuda(ctx.device());
  EMBER_CHECK(x.rank() >= 1 && x.numel() > 0, ShapeError,
              "layer normalization (cuda): expects input (..., features), got " + x.str());
  const int64_t c = x.dim(x.rank() - 1), r = x.numel() / c;
  check_f32(x, x.shape(), d, "the input");
  check_f32(gamma, Shape{c}, d, "gamma");
  check_f32(mean, Shape{r}, d, "the saved mean");
  check_f32(invstd, Shape{r}, d, "the saved inverse deviation");
  return {r, c};
}
}  // namespace

void layernorm_forward(Context& ctx, const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps, Tensor& y,
                       Tensor& mean, Tensor& invstd) {
  const auto [r, c] = check(ctx, x, gamma, mean, invstd);
  check_f32(beta, Shape{c}, x.device(), "beta");
  check_f32(y, x.shape(), x.device(), "the output");
  ln_forward<<<blocks_for(r), kThreads, 0, ctx.stream()>>>(in(x), in(gamma), in(beta), eps, out(y), out(mean),
                                                           out(invstd), r, c);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void layernorm_backward(Context& ctx, const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& mean,
                        const Tensor& invstd, Tensor* dx, Tensor& dgamma, Tensor& dbeta, Tensor& scratch) {
  const auto [r, c] = check(ctx, x, gamma, mean, invstd);
  check_f32(dy, x.shape(), x.device(), "the output gradient");
  check_f32(dgamma, Shape{c}, x.device(), "dgamma");
  check_f32(dbeta, Shape{c}, x.device(), "dbeta");
  if (dx) {
    check_f32(*dx, x.shape(), x.device(), "the input gradient");
    ln_backward_rows<<<blocks_for(r), kThreads, 0, ctx.stream()>>>(in(x), in(dy), in(gamma), in(mean), in(invstd),
                                                                   out(*dx), r, c);
    EMBER_CUDA_CHECK(cudaGetLastError());
  }
  const int64_t groups = ::ember::batch_groups(r);
  ensure(scratch, Shape{groups * 2 * c}, DType::F32, x.device());
  ln_group_sums<<<blocks_for(groups * c), kThreads, 0, ctx.stream()>>>(in(x), in(dy), in(mean), in(invstd),
                                                                       out(scratch), r, c, groups);
  EMBER_CUDA_CHECK(cudaGetLastError());
  ln_tree<<<blocks_for(2 * c), kThreads, 0, ctx.stream()>>>(out(scratch), groups, c, out(dgamma), out(dbeta));
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
