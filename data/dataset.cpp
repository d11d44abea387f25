// Dataset: validation, views, and the batch gather (data/cpu/gather.h).
#include "dataset.h"

#include "../core/error.h"
#include "cpu/gather.h"

namespace ember {

Dataset::Dataset(Tensor images, Tensor labels, int num_classes, std::string name)
    : images_(std::move(images)), labels_(std::move(labels)), num_classes_(num_classes), name_(std::move(name)) {
  EMBER_CHECK(images_.dtype() == DType::U8 && images_.rank() == 4, ShapeError,
              "Dataset: images must be u8 (N, C, H, W), got " + images_.str());
  EMBER_CHECK(labels_.dtype() == DType::I32 && labels_.rank() == 1, ShapeError,
              "Dataset: labels must be i32 (N), got " + labels_.str());
  EMBER_CHECK(
      images_.dim(0) == labels_.dim(0), ShapeError,
      "Dataset: " + std::to_string(images_.dim(0)) + " images but " + std::to_string(labels_.dim(0)) + " labels");
  EMBER_CHECK(num_classes > 0, ArgumentError, "Dataset: num_classes must be > 0");
  const int32_t* y = labels_.data<int32_t>();
  for (int64_t i = 0; i < labels_.numel(); ++i)
    EMBER_CHECK(y[i] >= 0 && y[i] < num_classes, ArgumentError,
                "Dataset: label " + std::to_string(y[i]) + " at index " + std::to_string(i) + " is outside [0, " +
                    std::to_string(num_classes) + ")");
}

Dataset Dataset::take(int64_t n) const {
  EMBER_CHECK(n >= 0 && n <= size(), ArgumentError,
              "Dataset::take(" + std::to_string(n) + ") of a dataset of " + std::to_string(size()));
  Dataset d = *this;
  d.images_ = images_.view(0, sample_shape().with_batch(n));
  d.labels_ = labels_.view(0, Shape{n});
  return d;
}

void Dataset::gather(std::span<const int64_t> indices, Tensor& x, Tensor& y) const {
  const int64_t b = static_cast<int64_t>(indices.size());
  ensure(x, sample_shape().with_batch(b), DType::F32, Device::cpu());
  ensure(y, Shape{b}, DType::I32, Device::cpu());
  cpu::gather_batch(images_, labels_, indices, x, y);
}

}  // namespace ember
