// shift2d (see pad.h): one thread per destination element.
#include "../../core/cuda/check.h"
#include "pad.h"

namespace ember::cuda {

namespace {
__global__ void shift2d_kernel(const float* __restrict__ src, int64_t planes, int64_t sh, int64_t sw,
                               float* __restrict__ dst, int64_t dh, int64_t dw, int64_t top, int64_t left, float fill) {
  const int64_t total = planes * dh * dw;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = e % dw, i = (e / dw) % dh, plane = e / (dw * dh);
    const int64_t si = i - top, sj = j - left;
    dst[e] = si >= 0 && si < sh && sj >= 0 && sj < sw ? src[(plane * sh + si) * sw + sj] : fill;
  }
}
}  // namespace

void shift2d(Context& ctx, const float* src, int64_t planes, int64_t sh, int64_t sw, float* dst, int64_t dh, int64_t dw,
             int64_t top, int64_t left, float fill) {
  const int64_t total = planes * dh * dw;
  if (total <= 0) return;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 4096));
  shift2d_kernel<<<blocks, 256, 0, ctx.stream()>>>(src, planes, sh, sw, dst, dh, dw, top, left, fill);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
