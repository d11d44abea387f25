// The batch gather (see gather.h): normalising uint8 pixels to [0, 1] floats on the fly.
#include "gather.h"

#include "../../core/error.h"

namespace ember::cpu {

void gather_batch(const Tensor& images, const Tensor& labels, std::span<const int64_t> indices, Tensor& x, Tensor& y) {
  const int64_t b = static_cast<int64_t>(indices.size()), n = images.dim(0);
  const int64_t per = images.numel() / (n > 0 ? n : 1);
  EMBER_CHECK(x.numel() == b * per && y.numel() == b, ShapeError,
              "gather (cpu): x must hold " + std::to_string(b) + " samples of " + std::to_string(per) + ", got " +
                  x.str() + " and " + y.str());
  const uint8_t* src = images.data<uint8_t>();
  const int32_t* lab = labels.data<int32_t>();
  float* dst = x.f32();
  int32_t* out = y.data<int32_t>();
  constexpr float kScale = 1.0f / 255.0f;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t idx = indices[static_cast<size_t>(i)];
    EMBER_CHECK(idx >= 0 && idx < n, ArgumentError,
                "Dataset::gather: index " + std::to_string(idx) + " outside a dataset of " + std::to_string(n));
    const uint8_t* s = src + idx * per;
    float* d = dst + i * per;
#pragma omp simd
    for (int64_t j = 0; j < per; ++j) d[j] = static_cast<float>(s[j]) * kScale;
    out[i] = lab[idx];
  }
}

}  // namespace ember::cpu
