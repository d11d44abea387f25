// The sum over one block's threads as a fixed tree in shared memory (the same bits run to run,
// whatever the scheduling): what the loss and metric kernels reduce their per-thread sums with.
// CUDA code only (included by .cu files).
#pragma once

namespace ember::cuda {

// The sum of every thread's s, in every thread. Called by every thread of a block of at most
// kThreads threads (a power of two), once per kernel: the shared array is the kernel's.
template <int kThreads>
__device__ __forceinline__ double block_sum(double s) {
  __shared__ double partial[kThreads];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  return partial[0];
}

}  // namespace ember::cuda
