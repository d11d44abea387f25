// Augmentation kernels: one thread per output element, grid-stride; each derives its sample's
// draw with layers/augment_math.h's functions (EMBER_HOST_DEVICE), so the CPU and GPU move the same
// pixels.
#include <algorithm>

#include "../../core/cuda/check.h"
#include "../../core/cuda/last_block.cuh"
#include "augment.h"

namespace ember::cuda {

namespace {
using ::ember::detail::AugmentSpec;

__device__ unsigned advance_ticket;

__device__ uint64_t key_of(const AugmentSpec& s, const float* counter, uint64_t back) {
  return counter != nullptr ? ::ember::detail::step_key(s.seed, ::ember::detail::counter_value(counter) - back) : 0;
}

// Forward (y[out] = x[in]) or backward (y[in] = x[out], y zeroed before).
__global__ void augment_kernel(AugmentSpec s, float* counter, const float* __restrict__ x, float* __restrict__ y,
                               int64_t n, int64_t c, bool backward, bool advance) {
  const uint64_t key = key_of(s, counter, backward ? 1 : 0);
  const int64_t out_plane = s.out_h * s.out_w, total = n * c * out_plane;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t plane = e / out_plane, pos = e - plane * out_plane;
    const int64_t i = pos / s.out_w, j = pos - i * s.out_w;
    const ::ember::detail::AugmentDraw d = ::ember::detail::augment_draw(s, key, plane / c);
    ::ember::detail::augment_pixel(s, d, plane, i, j, x, y, backward);
  }
  if (advance && last_block_to_read(advance_ticket)) ::ember::detail::counter_advance(counter);
}

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 4096)));
}

void check(const Context& ctx, const Tensor& t, const Shape& shape, const char* what) {
  EMBER_CHECK(t.dtype() == DType::F32 && t.device() == Device::cuda(ctx.device()) && t.numel() == shape.numel(),
              ShapeError,
              std::string("augmentation (cuda): ") + what + " must be " + shape.str() +
                  " f32 on cuda:" + std::to_string(ctx.device()) + ", got " + t.str());
}

float* counter_ptr(const Context& ctx, const Tensor* counter) {
  if (counter == nullptr) return nullptr;
  check(ctx, *counter, Shape{2}, "the step counter");
  return static_cast<float*>(const_cast<void*>(counter->raw()));
}
}  // namespace

void augment_forward(Context& ctx, const AugmentSpec& s, Tensor* counter, const Tensor& x, Tensor& y, int64_t n,
                     int64_t c, bool advance) {
  check(ctx, x, Shape{n, c, s.h, s.w}, "input");
  check(ctx, y, Shape{n, c, s.out_h, s.out_w}, "output");
  const int64_t total = n * c * s.out_h * s.out_w;
  augment_kernel<<<blocks_for(total), 256, 0, ctx.stream()>>>(
      s, counter_ptr(ctx, counter), static_cast<const float*>(x.raw()), static_cast<float*>(y.raw()), n, c, false,
      advance && counter != nullptr);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void augment_backward(Context& ctx, const AugmentSpec& s, const Tensor* counter, const Tensor& dy, Tensor& dx,
                      int64_t n, int64_t c) {
  check(ctx, dy, Shape{n, c, s.out_h, s.out_w}, "output gradient");
  check(ctx, dx, Shape{n, c, s.h, s.w}, "input gradient");
  EMBER_CUDA_CHECK(cudaMemsetAsync(dx.raw(), 0, dx.nbytes(), ctx.stream()));
  const int64_t total = n * c * s.out_h * s.out_w;
  augment_kernel<<<blocks_for(total), 256, 0, ctx.stream()>>>(s, counter_ptr(ctx, counter),
                                                              static_cast<const float*>(dy.raw()),
                                                              static_cast<float*>(dx.raw()), n, c, true, false);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
