/// @file
/// Average pooling, Keras' semantics (a window's average counts only the input positions inside
/// it; padding is not counted):
/// @code{.unparsed}
///   AvgPool2D({2, 2})            strides default to the pool size; padding Valid or Same;
///   GlobalAvgPool2D()            (N, C, H, W) -> (N, C): each channel's mean.
/// @endcode
/// Input in any layout; AvgPool2D's output in the backend's layout (NHWC on the CPU, the
/// input's on a GPU); GlobalAvgPool2D's output row-major (N, C).
#pragma once

#include <optional>

#include "geometry.h"
#include "layer.h"

namespace ember {

/// Average pooling over windows of `pool` (see avgpool2d.h).
class AvgPool2D : public Layer {
 public:
  /// Windows of `pool`, moved by `strides` (default: the pool size), with Valid or Same padding.
  /// ArgumentError for a pool size or stride that is not positive.
  explicit AvgPool2D(Size2 pool = {2, 2}, std::optional<Size2> strides = std::nullopt,
                     Padding padding = Padding::Valid);
  std::string type() const override { return "AvgPool2D"; }
  LayerConfig config() const override;
  bool rows_independent(bool /*training*/) const override { return true; }
  Shape build(const Shape& sample_shape) override;
  std::string kernel_info(int64_t batch, Device device) const override;

 protected:
  const Tensor& do_forward(const Tensor& x, bool training) override;
  const Tensor& do_backward(const Tensor& dy) override;

 private:
  Size2 pool_, strides_;
  Padding padding_;
  Pool2dShape g_;
  Shape in_shape_;
};

/// (N, C, H, W) -> (N, C): each channel's mean over its H x W positions; output row-major.
class GlobalAvgPool2D : public Layer {
 public:
  std::string type() const override { return "GlobalAvgPool2D"; }
  bool rows_independent(bool /*training*/) const override { return true; }
  Shape build(const Shape& sample_shape) override;
  std::string kernel_info(int64_t batch, Device device) const override;

 protected:
  const Tensor& do_forward(const Tensor& x, bool training) override;
  const Tensor& do_backward(const Tensor& dy) override;
  void do_release_buffers() override;

 private:
  Pool2dShape g_;
  Shape in_shape_;
  Tensor y_, dy4_;
};

}  // namespace ember
