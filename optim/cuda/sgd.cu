// SGD with momentum (see sgd.h): one pass over p, g and the velocity.
#include "../../core/cuda/check.h"
#include "sgd.h"

namespace ember::cuda {

namespace {
__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ vel, int64_t n,
                           const float* __restrict__ rate, float mu, bool nesterov) {
  const float lr = *rate;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float vi = mu * vel[i] - lr * g[i];
    vel[i] = vi;
    p[i] += nesterov ? mu * vi - lr * g[i] : vi;
  }
}
}  // namespace

void sgd_update(Context& ctx, float* params, const float* grads, float* velocity, int64_t n, const float* lr,
                float momentum, bool nesterov) {
  if (n <= 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 2048));
  sgd_kernel<<<blocks, 256, 0, ctx.stream()>>>(params, grads, velocity, n, lr, momentum, nesterov);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
