// Dataset: validation, views, splits, and the batch gather (data/cpu/gather.h).
#include "dataset.h"

#include <cmath>
#include <cstring>
#include <numeric>

#include "../core/error.h"
#include "../core/rng.h"
#include "cpu/gather.h"

namespace ember {

namespace {
void check_labels(const Tensor& labels, int num_classes) {
  if (labels.dtype() != DType::I32 || num_classes <= 0) return;
  const int32_t* y = labels.data<int32_t>();
  for (int64_t i = 0; i < labels.numel(); ++i)
    EMBER_CHECK(y[i] >= 0 && y[i] < num_classes, ArgumentError,
                "Dataset: label " + std::to_string(y[i]) + " at index " + std::to_string(i) + " is outside [0, " +
                    std::to_string(num_classes) + ")");
}

// `values` (row-major, count * per) as a CPU tensor of `shape`.
template <typename T>
Tensor tensor_of(std::span<const T> values, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, Device::cpu());
  if (!values.empty()) std::memcpy(t.raw(), values.data(), values.size_bytes());
  return t;
}

int64_t samples_in(size_t values, const Shape& sample, const char* what) {
  const int64_t per = sample.numel();
  EMBER_CHECK(per > 0 && static_cast<int64_t>(values) % per == 0, ShapeError,
              std::string("Dataset::from_vectors: ") + what + " hold " + std::to_string(values) +
                  " values, not a whole number of samples of " + sample.str());
  return static_cast<int64_t>(values) / per;
}
}  // namespace

Dataset::Dataset(Tensor images, Tensor labels, int num_classes, std::string name) {
  EMBER_CHECK(images.dtype() == DType::U8 && images.rank() == 4, ShapeError,
              "Dataset: images must be u8 (N, C, H, W), got " + images.str());
  EMBER_CHECK(labels.dtype() == DType::I32 && labels.rank() == 1, ShapeError,
              "Dataset: labels must be i32 (N), got " + labels.str());
  EMBER_CHECK(num_classes > 0, ArgumentError, "Dataset: num_classes must be > 0");
  *this = from_tensors(std::move(images), std::move(labels),
                       {.scale = 1.0f / 255.0f, .num_classes = num_classes, .name = std::move(name)});
}

Dataset Dataset::from_tensors(Tensor features, Tensor targets, DatasetOptions options) {
  EMBER_CHECK(features.defined() && (features.dtype() == DType::U8 || features.dtype() == DType::F32) &&
                  features.rank() >= 2 && features.device().is_cpu() && features.layout() == Layout::RowMajor,
              ShapeError, "Dataset: features must be u8 or f32 (N, ...) row-major on the cpu, got " + features.str());
  EMBER_CHECK(targets.defined() &&
                  ((targets.dtype() == DType::I32 && targets.rank() == 1) ||
                   (targets.dtype() == DType::F32 && targets.rank() >= 1)) &&
                  targets.device().is_cpu() && targets.layout() == Layout::RowMajor,
              ShapeError, "Dataset: targets must be i32 (N) labels or f32 (N, ...) on the cpu, got " + targets.str());
  EMBER_CHECK(features.dim(0) == targets.dim(0), ShapeError,
              "Dataset: " + std::to_string(features.dim(0)) + " samples of features but " +
                  std::to_string(targets.dim(0)) + " of targets");
  EMBER_CHECK(std::isfinite(options.scale) && options.scale != 0.0f, ArgumentError,
              "Dataset: the scale must be finite and non-zero, got " + std::to_string(options.scale));
  EMBER_CHECK(options.num_classes >= 0, ArgumentError, "Dataset: num_classes must be >= 0");
  check_labels(targets, options.num_classes);
  // One f32 value per sample: (N, 1), what a model's (1,) output is compared with.
  if (targets.dtype() == DType::F32 && targets.rank() == 1) targets = targets.reshape(Shape{targets.dim(0), 1});
  Dataset d;
  d.features_ = std::move(features);
  d.targets_ = std::move(targets);
  d.scale_ = options.scale;
  d.num_classes_ = options.num_classes;
  d.name_ = std::move(options.name);
  return d;
}

Dataset Dataset::from_vectors(std::span<const float> features, const Shape& sample, std::span<const float> targets,
                              const Shape& target, DatasetOptions options) {
  const int64_t n = samples_in(features.size(), sample, "the features");
  const int64_t m = samples_in(targets.size(), target, "the targets");
  EMBER_CHECK(
      n == m, ShapeError,
      "Dataset::from_vectors: " + std::to_string(n) + " samples of features but " + std::to_string(m) + " of targets");
  const Shape ts = target.rank() == 0 ? Shape{m, 1} : target.with_batch(m);  // one value: (N, 1)
  return from_tensors(tensor_of(features, sample.with_batch(n), DType::F32), tensor_of(targets, ts, DType::F32),
                      std::move(options));
}

Dataset Dataset::from_vectors(std::span<const float> features, const Shape& sample, std::span<const int32_t> labels,
                              DatasetOptions options) {
  const int64_t n = samples_in(features.size(), sample, "the features");
  EMBER_CHECK(n == static_cast<int64_t>(labels.size()), ShapeError,
              "Dataset::from_vectors: " + std::to_string(n) + " samples of features but " +
                  std::to_string(labels.size()) + " labels");
  return from_tensors(tensor_of(features, sample.with_batch(n), DType::F32), tensor_of(labels, Shape{n}, DType::I32),
                      std::move(options));
}

Dataset Dataset::take(int64_t n) const {
  EMBER_CHECK(n >= 0 && n <= size(), ArgumentError,
              "Dataset::take(" + std::to_string(n) + ") of a dataset of " + std::to_string(size()));
  return slice(0, n);
}

Dataset Dataset::slice(int64_t begin, int64_t end) const {
  EMBER_CHECK(0 <= begin && begin <= end && end <= size(), ArgumentError,
              "Dataset::slice(" + std::to_string(begin) + ", " + std::to_string(end) + ") of a dataset of " +
                  std::to_string(size()));
  Dataset d = *this;
  d.features_ = features_.view(begin * sample_shape().numel(), sample_shape().with_batch(end - begin));
  d.targets_ = targets_.view(begin * target_shape().numel(), target_shape().with_batch(end - begin));
  return d;
}

std::pair<Dataset, Dataset> Dataset::split(double fraction, uint64_t seed) const {
  EMBER_CHECK(fraction > 0.0 && fraction < 1.0, ArgumentError,
              "Dataset::split: the fraction must be in (0, 1), got " + std::to_string(fraction));
  // As validation_split (Keras): floor(n (1 - fraction)) samples in the first part.
  const int64_t held = size() - static_cast<int64_t>(std::floor(static_cast<double>(size()) * (1.0 - fraction)));
  EMBER_CHECK(held > 0 && held < size(), ArgumentError,
              "Dataset::split(" + std::to_string(fraction) + ") of " + std::to_string(size()) +
                  " samples: both parts must be non-empty");
  std::vector<int64_t> order(static_cast<size_t>(size()));
  std::iota(order.begin(), order.end(), int64_t{0});
  Rng rng = Rng(seed).fork(0x53504c4954ull /* "SPLIT" */);
  for (size_t i = order.size() - 1; i > 0; --i) std::swap(order[i], order[rng.below(i + 1)]);
  // Copies of the rows in that order: the first size - held, then the rest.
  const auto part = [&](int64_t begin, int64_t end) {
    Tensor f = Tensor::empty(sample_shape().with_batch(end - begin), features_.dtype(), Device::cpu());
    Tensor t = Tensor::empty(target_shape().with_batch(end - begin), targets_.dtype(), Device::cpu());
    const size_t fb = features_.nbytes() / static_cast<size_t>(size()),
                 tb = targets_.nbytes() / static_cast<size_t>(size());
    for (int64_t i = begin; i < end; ++i) {
      const auto src = static_cast<size_t>(order[static_cast<size_t>(i)]);
      std::memcpy(static_cast<char*>(f.raw()) + static_cast<size_t>(i - begin) * fb,
                  static_cast<const char*>(features_.raw()) + src * fb, fb);
      std::memcpy(static_cast<char*>(t.raw()) + static_cast<size_t>(i - begin) * tb,
                  static_cast<const char*>(targets_.raw()) + src * tb, tb);
    }
    Dataset d = *this;
    d.features_ = f;
    d.targets_ = t;
    return d;
  };
  return {part(0, size() - held), part(size() - held, size())};
}

void Dataset::gather(std::span<const int64_t> indices, Tensor& x, Tensor& y) const {
  const int64_t b = static_cast<int64_t>(indices.size());
  ensure(x, sample_shape().with_batch(b), DType::F32, Device::cpu());
  ensure(y, target_shape().with_batch(b), targets_.dtype(), Device::cpu());
  cpu::gather_batch(features_, targets_, scale_, indices, x, y);
}

}  // namespace ember
