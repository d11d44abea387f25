// The augmentation layers' map on the CPU (see augment.h): per sample its draw, then per output
// row the row it reads; the same draw and indices as the CUDA kernels (layers/augment_math.h).
#include "augment.h"

#include <algorithm>

#include "../../core/error.h"

namespace ember::cpu {

uint64_t augment_key(const detail::AugmentSpec& s, const Tensor& counter) {
  EMBER_CHECK(counter.numel() == 2 && counter.dtype() == DType::F32 && counter.device().is_cpu(), ShapeError,
              "augmentation (cpu): the step counter must be 2 f32 values, got " + counter.str());
  return detail::step_key(s.seed, detail::counter_value(counter.f32()));
}

void augment(const detail::AugmentSpec& s, uint64_t key, const float* x, float* y, int64_t n, int64_t c,
             bool backward) {
  const int64_t out_plane = s.out_h * s.out_w;
  if (backward) std::fill_n(y, n * c * s.h * s.w, 0.0f);
#pragma omp parallel for schedule(static) if (n * c * out_plane > 65536)
  for (int64_t b = 0; b < n; ++b) {
    const detail::AugmentDraw d = detail::augment_draw(s, key, b);
    for (int64_t ch = 0; ch < c; ++ch) {
      for (int64_t i = 0; i < s.out_h; ++i)
        for (int64_t j = 0; j < s.out_w; ++j) detail::augment_pixel(s, d, b * c + ch, i, j, x, y, backward);
    }
  }
}

}  // namespace ember::cpu
