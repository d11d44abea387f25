// The batch gather (see gather.h): u8 pixels become scaled floats on the fly, i32 ids are copied.
#include "gather.h"

#include <cstring>

#include "../../core/error.h"

namespace ember::cpu {

void gather_batch(const Tensor& features, const Tensor& targets, float scale, std::span<const int64_t> indices,
                  Tensor& x, Tensor& y) {
  const int64_t b = static_cast<int64_t>(indices.size()), n = features.dim(0);
  const bool with_targets = targets.defined();  // undefined: the features alone (a model's further inputs)
  const int64_t per = features.numel() / (n > 0 ? n : 1), tper = with_targets ? targets.numel() / (n > 0 ? n : 1) : 0;
  const bool bytes = features.dtype() == DType::U8, ids = features.dtype() == DType::I32;
  EMBER_CHECK(bytes || ids || features.dtype() == DType::F32, ShapeError,
              "gather (cpu): features must be u8, f32 or i32, got " + features.str());
  const DType x_dtype = ids ? DType::I32 : DType::F32;
  EMBER_CHECK(x.numel() == b * per && x.dtype() == x_dtype &&
                  (!with_targets || (y.numel() == b * tper && y.dtype() == targets.dtype() && targets.dim(0) == n)),
              ShapeError,
              "gather (cpu): x must hold " + std::to_string(b) + " samples of " + std::to_string(per) + " " +
                  dtype_name(x_dtype) + " and y " + std::to_string(tper) + " targets each, got " + x.str() + " and " +
                  y.str());
  EMBER_CHECK(!ids || scale == 1.0f, ArgumentError,
              "gather (cpu): i32 ids are copied as they are: the scale must be 1, got " + std::to_string(scale));
  const size_t target_bytes = with_targets ? static_cast<size_t>(tper) * dtype_size(targets.dtype()) : 0;
  for (int64_t i = 0; i < b; ++i) {
    const int64_t idx = indices[static_cast<size_t>(i)];
    EMBER_CHECK(idx >= 0 && idx < n, ArgumentError,
                "Dataset::gather: index " + std::to_string(idx) + " outside a dataset of " + std::to_string(n));
    if (ids) {
      std::memcpy(x.data<int32_t>() + i * per, features.data<int32_t>() + idx * per,
                  static_cast<size_t>(per) * sizeof(int32_t));
    } else if (bytes) {
      float* d = x.f32() + i * per;
      const uint8_t* s = features.data<uint8_t>() + idx * per;
#pragma omp simd
      for (int64_t j = 0; j < per; ++j) d[j] = static_cast<float>(s[j]) * scale;
    } else {
      float* d = x.f32() + i * per;
      const float* s = features.f32() + idx * per;
#pragma omp simd
      for (int64_t j = 0; j < per; ++j) d[j] = s[j] * scale;
    }
    if (with_targets)
      std::memcpy(static_cast<char*>(y.raw()) + static_cast<size_t>(i) * target_bytes,
                  static_cast<const char*>(targets.raw()) + static_cast<size_t>(idx) * target_bytes, target_bytes);
  }
}

}  // namespace ember::cpu
