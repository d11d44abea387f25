// RMSprop (see rmsprop.h): one pass over p, g and v.
#include "../../core/cuda/check.h"
#include "rmsprop.h"

namespace ember::cuda {

namespace {
__global__ void rmsprop_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ v, int64_t n,
                               const float* __restrict__ rate, float rho, float epsilon) {
  const float lr = *rate;
  const float one_rho = 1.0f - rho;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float gi = g[i];
    const float vi = rho * v[i] + one_rho * gi * gi;
    v[i] = vi;
    p[i] -= lr * gi / sqrtf(vi + epsilon);  // sqrtf: correctly rounded, as std::sqrt
  }
}
}  // namespace

void rmsprop_update(Context& ctx, float* params, const float* grads, float* v, int64_t n, const float* lr, float rho,
                    float epsilon) {
  if (n <= 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 2048));
  rmsprop_kernel<<<blocks, 256, 0, ctx.stream()>>>(params, grads, v, n, lr, rho, epsilon);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
