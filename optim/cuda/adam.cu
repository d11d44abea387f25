// Fused Adam (see adam.h): a grid-stride loop, one read and one write of each state element.
#include "../../core/cuda/check.h"
#include "adam.h"

namespace ember::cuda {

namespace {
__global__ void adam_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ v, int64_t n, float lr_t, float beta1, float beta2, float epsilon) {
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

void adam_update(Context& ctx, float* params, const float* grads, float* m, float* v, int64_t n, float lr_t,
                 float beta1, float beta2, float epsilon) {
  if (n <= 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 2048));
  adam_kernel<<<blocks, 256, 0, ctx.stream()>>>(params, grads, m, v, n, lr_t, beta1, beta2, epsilon);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
