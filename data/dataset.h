// Dataset: inputs and targets kept in memory as they came (u8 images stay u8: MNIST's 60,000
// take 47 MB, not 188) and turned into f32 batches on the fly.
//
//   features  u8 or f32 (N, ...)    a batch's x is f32 (B, ...) = features * scale()
//   targets   i32 (N) labels, or f32 (N, ...) values (regression, one-hot, multi-label, x itself)
//
// The scale is the one transform, and explicit: images of bytes come with 1/255 (the image
// constructor and the MNIST loader say so), anything else with 1 unless given.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../core/tensor.h"

namespace ember {

struct DatasetOptions {
  float scale = 1.0f;   // x = features * scale (u8 images: 1 / 255)
  int num_classes = 0;  // i32 labels: checked to lie in [0, num_classes) when > 0
  std::string name{};
};

class Dataset {
 public:
  Dataset() = default;
  // images: u8 (N, C, H, W) scaled by 1/255; labels: i32 (N) in [0, num_classes). ShapeError
  // when they do not match, ArgumentError for a label out of range.
  Dataset(Tensor images, Tensor labels, int num_classes, std::string name = "");
  // Any features (u8 or f32, (N, ...)) and targets (i32 (N) labels or f32 (N, ...); f32 (N) is
  // taken as (N, 1)), on the CPU.
  static Dataset from_tensors(Tensor features, Tensor targets, DatasetOptions options = {});
  // From vectors: `features` holds N samples of `sample` (row-major), `targets` N of `target`
  // (Shape{} for one value per sample). ShapeError names what does not divide.
  static Dataset from_vectors(std::span<const float> features, const Shape& sample, std::span<const float> targets,
                              const Shape& target, DatasetOptions options = {});
  static Dataset from_vectors(std::span<const float> features, const Shape& sample, std::span<const int32_t> labels,
                              DatasetOptions options = {});

  int64_t size() const { return features_.defined() ? features_.dim(0) : 0; }
  Shape sample_shape() const { return features_.shape().without_batch(); }
  Shape target_shape() const { return targets_.shape().without_batch(); }  // Shape{} for labels
  DType target_dtype() const { return targets_.dtype(); }
  float scale() const { return scale_; }
  int num_classes() const { return num_classes_; }
  const std::string& name() const { return name_; }
  const Tensor& features() const { return features_; }
  const Tensor& targets() const { return targets_; }
  // The names of an image dataset's two tensors.
  const Tensor& images() const { return features_; }
  const Tensor& labels() const { return targets_; }

  // The first n samples (a view, no copy), e.g. for quick runs and tests.
  Dataset take(int64_t n) const;
  // Samples [begin, end) (a view, no copy).
  Dataset slice(int64_t begin, int64_t end) const;
  // A seeded shuffle split into (1 - fraction, fraction) of the samples (copies): a held-out set
  // drawn at random. fraction in (0, 1); both parts non-empty.
  std::pair<Dataset, Dataset> split(double fraction, uint64_t seed) const;

  // Gathers `indices` into x (f32 (B, ...) row-major, features * scale) and y (targets' dtype,
  // (B, ...)). Reuses x and y when their shapes already fit.
  void gather(std::span<const int64_t> indices, Tensor& x, Tensor& y) const;

 private:
  Tensor features_, targets_;
  float scale_ = 1.0f;
  int num_classes_ = 0;
  std::string name_;
};

}  // namespace ember
