// Dataset: images kept as uint8 (N, C, H, W) in memory and int32 labels (N); batches are
// normalised to float (x / 255) on the fly, so MNIST's 60,000 images take 47 MB, not 188.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "../core/tensor.h"

namespace ember {

class Dataset {
 public:
  Dataset() = default;
  // images: u8 (N, C, H, W); labels: i32 (N). Throws ShapeError when they do not match.
  Dataset(Tensor images, Tensor labels, int num_classes, std::string name = "");

  int64_t size() const { return images_.defined() ? images_.dim(0) : 0; }
  Shape sample_shape() const { return images_.shape().without_batch(); }
  int num_classes() const { return num_classes_; }
  const std::string& name() const { return name_; }
  const Tensor& images() const { return images_; }
  const Tensor& labels() const { return labels_; }

  // The first n samples (a view, no copy), e.g. for quick runs and tests.
  Dataset take(int64_t n) const;

  // Gathers `indices` into x (f32 (B, C, H, W) row-major, normalised to [0, 1]) and y (i32 (B)).
  // Reuses x and y when their shapes already fit.
  void gather(std::span<const int64_t> indices, Tensor& x, Tensor& y) const;

 private:
  Tensor images_, labels_;
  int num_classes_ = 0;
  std::string name_;
};

}  // namespace ember
