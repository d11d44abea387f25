// The augmentation layers (see augmentation.h).
#include "augmentation.h"

#include <cmath>

#include "../core/error.h"
#include "layer_config.h"
#include "ops/augment.h"

namespace ember {

std::vector<StateSpec> RandomAugmentation::state_specs() const {
  // The step counter [lo, hi] (layers/random_bits.h); advanced alike by every replica.
  return {StateSpec{.name = "step", .shape = Shape{2}, .init = 0.0f, .averaged = false}};
}

void RandomAugmentation::build_spatial(const Shape& sample, int64_t out_h, int64_t out_w) {
  EMBER_CHECK(sample.rank() == 3, ShapeError,
              type() + ": expects (channels, height, width) samples, got " + sample.str());
  in_ = sample;
  spec_.h = sample[1];
  spec_.w = sample[2];
  spec_.out_h = out_h;
  spec_.out_w = out_w;
}

const Tensor& RandomAugmentation::do_forward(const Tensor& x, bool training) {
  EMBER_CHECK(state_tensors_.size() == 1, Error, type() + ": bind_state() first (Model::build does)");
  passed_ = !training && identity_in_inference();
  if (passed_) return x;
  spec_.random = training;
  return detail::augment_forward(state_, spec_, training ? &state_tensors_[0] : nullptr, x);
}

const Tensor& RandomAugmentation::do_backward(const Tensor& dy) {
  if (!needs_input_grad()) return no_input_grad();
  if (passed_) return dy;
  return detail::augment_backward(state_, spec_, dy);
}

std::string RandomAugmentation::kernel_info(int64_t, Device device) const {
  return device.is_cuda() ? "ember CUDA kernel (counter-based draw)" : "ember cpu loop (counter-based draw)";
}

RandomFlip::RandomFlip(std::string mode) : mode_(std::move(mode)) {
  EMBER_CHECK(mode_ == "horizontal" || mode_ == "vertical" || mode_ == "horizontal_and_vertical", ArgumentError,
              "RandomFlip: mode must be horizontal, vertical or horizontal_and_vertical, got '" + mode_ + "'");
  spec_.flip_h = mode_ != "vertical";
  spec_.flip_v = mode_ != "horizontal";
}

Shape RandomFlip::build(const Shape& sample) {
  build_spatial(sample, sample.rank() == 3 ? sample[1] : 0, sample.rank() == 3 ? sample[2] : 0);
  return sample;
}

RandomTranslation::RandomTranslation(float height_factor, float width_factor)
    : height_factor_(height_factor), width_factor_(width_factor) {
  for (const float f : {height_factor, width_factor})
    EMBER_CHECK(std::isfinite(f) && f >= 0.0f && f < 1.0f, ArgumentError,
                "RandomTranslation: factors must be in [0, 1), got " + std::to_string(f));
}

Shape RandomTranslation::build(const Shape& sample) {
  build_spatial(sample, sample.rank() == 3 ? sample[1] : 0, sample.rank() == 3 ? sample[2] : 0);
  // Shifts of up to m pixels: a window of the image padded by m, offsets in [0, 2m].
  const auto most = [](float f, int64_t n) { return std::lround(static_cast<double>(f) * static_cast<double>(n)); };
  const int64_t my = most(height_factor_, spec_.h), mx = most(width_factor_, spec_.w);
  spec_.pad_y = my;
  spec_.pad_x = mx;
  spec_.max_oy = 2 * my;
  spec_.max_ox = 2 * mx;
  return sample;
}

LayerConfig RandomTranslation::config() const {
  return {{"height_factor", config_value(height_factor_)}, {"width_factor", config_value(width_factor_)}};
}

RandomCrop::RandomCrop(int64_t height, int64_t width, int64_t padding)
    : height_(height), width_(width), padding_(padding) {
  EMBER_CHECK(height >= 1 && width >= 1 && padding >= 0, ArgumentError,
              "RandomCrop: height and width must be >= 1 and padding >= 0, got " + std::to_string(height) + ", " +
                  std::to_string(width) + ", " + std::to_string(padding));
}

Shape RandomCrop::build(const Shape& sample) {
  build_spatial(sample, height_, width_);
  EMBER_CHECK(height_ <= spec_.h + 2 * padding_ && width_ <= spec_.w + 2 * padding_, ShapeError,
              "RandomCrop: a " + std::to_string(height_) + "x" + std::to_string(width_) + " window of " + sample.str() +
                  " padded by " + std::to_string(padding_) + " does not fit");
  spec_.pad_y = spec_.pad_x = padding_;
  spec_.max_oy = spec_.h + 2 * padding_ - height_;
  spec_.max_ox = spec_.w + 2 * padding_ - width_;
  return Shape{sample[0], height_, width_};
}

LayerConfig RandomCrop::config() const {
  return {{"height", config_value(height_)}, {"width", config_value(width_)}, {"padding", config_value(padding_)}};
}

Rescaling::Rescaling(float scale, float offset) {
  EMBER_CHECK(
      std::isfinite(scale) && std::isfinite(offset), ArgumentError,
      "Rescaling: scale and offset must be finite, got " + std::to_string(scale) + ", " + std::to_string(offset));
  spec_.rescale = true;
  spec_.scale = scale;
  spec_.offset = offset;
}

const Tensor& Rescaling::do_forward(const Tensor& x, bool) {
  return detail::augment_forward(state_, spec_, nullptr, x);
}

const Tensor& Rescaling::do_backward(const Tensor& dy) {
  if (!needs_input_grad()) return no_input_grad();
  return detail::augment_backward(state_, spec_, dy);
}

LayerConfig Rescaling::config() const {
  return {{"scale", config_value(spec_.scale)}, {"offset", config_value(spec_.offset)}};
}

std::string Rescaling::kernel_info(int64_t, Device device) const {
  return device.is_cuda() ? "ember CUDA kernel" : "ember cpu loop";
}

}  // namespace ember
