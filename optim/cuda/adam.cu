// Fused Adam (see adam.h): a grid-stride loop, one read and one write of each state element.
#include "../../core/cuda/check.h"
#include "../../core/cuda/last_block.cuh"
#include "adam.h"

namespace ember::cuda {

namespace {
// lr sqrt(1 - beta2^t) / (1 - beta1^t): the host's formula. Not inlined, so that the one-thread
// advance and every block of the folded update run the same instructions and give the same bits
// (inlined, the compiler could contract a multiply inside pow with the subtraction differently in
// each kernel). CUDA's double pow is within 2 ulp where glibc's rounds correctly, so the float
// step size may differ from the CPU path's by one ulp (eager and graph steps agree).
__device__ __noinline__ double adam_step_size(double lr, double t, double beta1, double beta2) {
  return lr * sqrt(1.0 - pow(beta2, t)) / (1.0 - pow(beta1, t));
}

// The update of every element, shared by both update kernels so that they cannot differ by a bit.
__device__ __forceinline__ void adam_elements(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                                              float* __restrict__ v, int64_t n, float lr_t, float beta1, float beta2,
                                              float epsilon) {
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

__global__ void advance_kernel(double* scalars, const float* rate, double beta1, double beta2) {
  const double lr = static_cast<double>(*rate);  // exact, as the host's conversion
  const double t = scalars[0] + 1.0;
  scalars[0] = t;
  scalars[1] = adam_step_size(lr, t, beta1, beta2);
}

__global__ void set_rate_kernel(float* rate, float value) { *rate = value; }

__global__ void adam_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                            float* __restrict__ v, int64_t n, const double* __restrict__ scalars, float beta1,
                            float beta2, float epsilon) {
  adam_elements(p, g, m, v, n, static_cast<float>(scalars[1]), beta1, beta2, epsilon);
}

// adam_update_advance's ticket: how many blocks of the running launch have read {t, lr_t}; 0
// between launches (the last block sets it back, so the next launch, eager or a CUDA graph's
// replay, starts from 0). The module's variable, per device, at a fixed address; one for the
// file, as a device's ops run on one stream.
__device__ unsigned advance_ticket;

// advance_kernel then adam_kernel in one launch. Thread 0 of each block reads {t, *rate} and
// computes the step's t and lr_t as advance_kernel does (same function, same inputs: same bits);
// after the loop, each block's thread 0 takes a ticket, and the block that draws the last one
// knows that every block has read the old t, so it stores the new {t, lr_t}. The barriers order
// the block's read before its ticket; the ticket's release/acquire orders every block's read
// before the last block's store.
__global__ void adam_advance_kernel(float* __restrict__ p, const float* __restrict__ g, float* __restrict__ m,
                                    float* __restrict__ v, int64_t n, double* scalars, const float* rate, float beta1,
                                    float beta2, float epsilon) {
  __shared__ double step_t, step_lr;
  if (threadIdx.x == 0) {
    step_t = scalars[0] + 1.0;
    // beta1, beta2 widened exactly as adam_advance's double parameters receive them.
    step_lr =
        adam_step_size(static_cast<double>(*rate), step_t, static_cast<double>(beta1), static_cast<double>(beta2));
  }
  __syncthreads();
  adam_elements(p, g, m, v, n, static_cast<float>(step_lr), beta1, beta2, epsilon);
  if (!last_block_to_read(advance_ticket)) return;
  scalars[0] = step_t;
  scalars[1] = step_lr;
}

unsigned update_blocks(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 2048)); }
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
  adam_kernel<<<update_blocks(n), 256, 0, ctx.stream()>>>(params, grads, m, v, n, scalars, beta1, beta2, epsilon);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void adam_update_advance(Context& ctx, float* params, const float* grads, float* m, float* v, int64_t n,
                         double* scalars, const float* lr, float beta1, float beta2, float epsilon) {
  if (n <= 0) {  // no update kernel to fold the advance into
    adam_advance(ctx, scalars, lr, beta1, beta2);
    return;
  }
  adam_advance_kernel<<<update_blocks(n), 256, 0, ctx.stream()>>>(params, grads, m, v, n, scalars, lr, beta1, beta2,
                                                                  epsilon);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
