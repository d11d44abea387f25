/// @file
/// Preprocessing and augmentation layers (Keras' RandomFlip, RandomTranslation, RandomCrop,
/// Rescaling) on image batches (N, C, H, W). The random ones act only in training (fit's steps,
/// forward(x, true)); in evaluate and predict RandomFlip and RandomTranslation pass their input
/// through and RandomCrop takes the central window. What each sample gets is a function of the
/// model's seed, the layer's position, the replica and a step counter kept in the model's state
/// (as Dropout's: layers/random_bits.h): the same on the CPU and a GPU, and a resumed run draws
/// what the uninterrupted one would have. Pixels shifted in from outside the image are zero
/// (Keras' fill_mode="constant"); shifts are whole pixels (no interpolation).
///
/// @code
///   SymbolicTensor x = Input(Shape{1, 28, 28});
///   SymbolicTensor h = layer<RandomCrop>(28, 28, /*padding=*/2)(x);  // torchvision's RandomCrop(28, padding=2)
///   h = layer<RandomFlip>("horizontal")(h);
/// @endcode
#pragma once

#include <string>

#include "augment_math.h"
#include "layer.h"

namespace ember {

/// The random augmentation layers' common part: per-sample whole-pixel offsets and flips
/// (detail::AugmentSpec), drawn from a step counter in the model's state.
class RandomAugmentation : public Layer {
 public:
  std::vector<StateSpec> state_specs() const override;
  void set_random_seed(uint64_t seed) override { spec_.seed = seed; }
  uint64_t random_seed() const override { return spec_.seed; }
  std::string kernel_info(int64_t, Device device) const override;

 protected:
  /// Validates a (C, H, W) sample and fills the spec's sizes; the subclass sets the rest.
  void build_spatial(const Shape& sample, int64_t out_h, int64_t out_w);
  const Tensor& do_forward(const Tensor& x, bool training) override;
  const Tensor& do_backward(const Tensor& dy) override;
  /// Whether inference passes the input through (a flip or a translation: the middle is itself).
  virtual bool identity_in_inference() const { return true; }
  detail::AugmentSpec spec_;  ///< sizes, ranges and flips; `random` set per call
  Shape in_;                  ///< the sample shape (C, H, W)

 private:
  bool passed_ = false;  // the last forward passed its input through
};

/// Flips each image left-right ("horizontal"), upside down ("vertical") or either
/// ("horizontal_and_vertical", Keras' default), each with probability 1/2, in training.
class RandomFlip : public RandomAugmentation {
 public:
  /// ArgumentError for another mode.
  explicit RandomFlip(std::string mode = "horizontal_and_vertical");
  std::string type() const override { return "RandomFlip"; }
  Shape build(const Shape& sample_shape) override;
  LayerConfig config() const override { return {{"mode", mode_}}; }
  const std::string& mode() const { return mode_; }  ///< The flips it draws.

 private:
  std::string mode_;
};

/// Shifts each image by a whole number of pixels, uniform in [-round(height_factor H),
/// round(height_factor H)] rows and likewise columns, zeros shifted in, in training (Keras'
/// RandomTranslation with fill_mode="constant", whole pixels).
class RandomTranslation : public RandomAugmentation {
 public:
  /// Factors in [0, 1) (ArgumentError else).
  RandomTranslation(float height_factor, float width_factor);
  std::string type() const override { return "RandomTranslation"; }
  Shape build(const Shape& sample_shape) override;
  LayerConfig config() const override;

 private:
  float height_factor_, width_factor_;
};

/// A random height x width window of each image padded with `padding` zeros on every side, in
/// training; the central window in inference (torchvision's RandomCrop(size, padding); Keras'
/// RandomCrop when padding is 0). Output (C, height, width).
class RandomCrop : public RandomAugmentation {
 public:
  /// height, width >= 1, padding >= 0 (ArgumentError else); ShapeError at build when the window
  /// is larger than the padded image.
  RandomCrop(int64_t height, int64_t width, int64_t padding = 0);
  std::string type() const override { return "RandomCrop"; }
  Shape build(const Shape& sample_shape) override;
  LayerConfig config() const override;

 protected:
  bool identity_in_inference() const override { return false; }

 private:
  int64_t height_, width_, padding_;
};

/// y = x * scale + offset (one rounding: a fused multiply-add), in training and inference (Keras' Rescaling: 1/255 maps
/// bytes to [0, 1]); any sample shape.
class Rescaling : public Layer {
 public:
  /// Finite scale and offset (ArgumentError else).
  explicit Rescaling(float scale, float offset = 0.0f);
  std::string type() const override { return "Rescaling"; }
  Shape build(const Shape& sample_shape) override { return sample_shape; }
  bool rows_independent(bool) const override { return true; }
  LayerConfig config() const override;
  std::string kernel_info(int64_t, Device device) const override;

 protected:
  const Tensor& do_forward(const Tensor& x, bool training) override;
  const Tensor& do_backward(const Tensor& dy) override;

 private:
  detail::AugmentSpec spec_;  // the identity map with rescale
};

}  // namespace ember
