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

// Forward (y[out] = x[in]) or backward (y[in] = x[out], y zeroed before) under the draw of
// `counter` (null: none). The forward's first thread writes the value it drew from to `drawn`; with
// `advance` the last block advances the counter once every block has read it.
__global__ void augment_kernel(AugmentSpec s, float* counter, float* drawn, const float* __restrict__ x,
                               float* __restrict__ y, int64_t n, int64_t c, bool backward, bool advance) {
  float lo = 0.0f, hi = 0.0f;
  if (counter != nullptr) {
    lo = counter[0];
    hi = counter[1];
  }
  const float value[2] = {lo, hi};
  const uint64_t key =
      counter != nullptr ? ::ember::detail::step_key(s.seed, ::ember::detail::counter_value(value)) : 0;
  if (drawn != nullptr && blockIdx.x == 0 && threadIdx.x == 0) {
    drawn[0] = lo;
    drawn[1] = hi;
  }
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

float* pair_ptr(const Context& ctx, const Tensor* t, const char* what) {
  if (t == nullptr) return nullptr;
  check(ctx, *t, Shape{2}, what);
  return static_cast<float*>(const_cast<void*>(t->raw()));
}
}  // namespace

void augment_forward(Context& ctx, const AugmentSpec& s, Tensor* counter, Tensor* drawn, const Tensor& x, Tensor& y,
                     int64_t n, int64_t c, bool advance) {
  check(ctx, x, Shape{n, c, s.h, s.w}, "input");
  check(ctx, y, Shape{n, c, s.out_h, s.out_w}, "output");
  EMBER_CHECK((counter == nullptr) == (drawn == nullptr), ArgumentError,
              "augmentation (cuda): a draw needs both the counter and a place for the value drawn from");
  const int64_t total = n * c * s.out_h * s.out_w;
  augment_kernel<<<blocks_for(total), 256, 0, ctx.stream()>>>(
      s, pair_ptr(ctx, counter, "the step counter"), pair_ptr(ctx, drawn, "the drawn value"),
      static_cast<const float*>(x.raw()), static_cast<float*>(y.raw()), n, c, false, advance && counter != nullptr);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void augment_backward(Context& ctx, const AugmentSpec& s, const Tensor* drawn, const Tensor& dy, Tensor& dx, int64_t n,
                      int64_t c) {
  check(ctx, dy, Shape{n, c, s.out_h, s.out_w}, "output gradient");
  check(ctx, dx, Shape{n, c, s.h, s.w}, "input gradient");
  EMBER_CUDA_CHECK(cudaMemsetAsync(dx.raw(), 0, dx.nbytes(), ctx.stream()));
  const int64_t total = n * c * s.out_h * s.out_w;
  // The backward reads `drawn` as its counter and advances nothing.
  augment_kernel<<<blocks_for(total), 256, 0, ctx.stream()>>>(s, pair_ptr(ctx, drawn, "the drawn value"), nullptr,
                                                              static_cast<const float*>(dy.raw()),
                                                              static_cast<float*>(dx.raw()), n, c, true, false);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
