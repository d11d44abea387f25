// Fused Adam (see adam.h): a grid-stride loop, one read and one write of each state element.
#include "../../core/cuda/check.h"
#include "adam.h"

namespace ember::cuda {

namespace {
__global__ void advance_kernel(double* scalars, const float* rate, double beta1, double beta2) {
  const double lr = static_cast<double>(*rate);  // exact, as the host's conversion
  const double t = scalars[0] + 1.0;
  scalars[0] = t;
  // The host's formula; CUDA's double pow is within 2 ulp where glibc's rounds correctly, so the
  // float step size may differ from the CPU path's by one ulp (eager and graph steps agree).
  scalars[1] = lr * sqrt(1.0 - pow(beta2, t)) / (1.0 - pow(beta1, t));
}

__global__ void set_rate_kernel(float* rate, float value) { *rate = value; }

__global__ void adam_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ v, int64_t n, const double* __restrict__ scalars, float beta1,
                            float beta2, float epsilon) {
  const float lr_t = static_cast<float>(scalars[1]);
  const float one_b1 = 1.0f - beta1, one_b2 = 1.0f - beta2;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = g[i];
    const float mi = beta1 * m[i] + one_b1 * gi;
    const float vi = beta2 * v[i] + one_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr_t * mi / (sqrtf(vi) + epsilon);  // sqrtf: correctly rounded, as std::sqrt on the CPU
  }
}
}  // namespace

void adam_advance(Context& ctx, double* scalars, const float* lr, double beta1, double beta2) {
  advance_kernel<<<1, 1, 0, ctx.stream()>>>(scalars, lr, beta1, beta2);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void set_rate(Context& ctx, float* rate, float value) {
  set_rate_kernel<<<1, 1, 0, ctx.stream()>>>(rate, value);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void adam_update(Context& ctx, float* params, const float* grads, float* m, float* v, int64_t n, const double* scalars,
                 float beta1, float beta2, float epsilon) {
  if (n <= 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 2048));
  adam_kernel<<<blocks, 256, 0, ctx.stream()>>>(params, grads, m, v, n, scalars, beta1, beta2, epsilon);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
