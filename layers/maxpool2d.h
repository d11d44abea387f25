/// @file
/// MaxPool2D: Keras-like max pooling. MaxPool2D({2, 2}) pools 2x2 windows with stride 2 (the
/// strides default to the pool size, as in Keras); padding Valid or Same.
/// Input (N, C, H, W) in any layout; output (N, C, P, Q) in the layout the backend runs in
/// (NHWC on the CPU, NCHW on a GPU; layers/ops/maxpool2d.h).
#pragma once

#include <optional>

#include "activation.h"
#include "geometry.h"
#include "layer.h"

namespace ember {

/// Max pooling over windows of `pool` (see maxpool2d.h).
class MaxPool2D : public Layer {
 public:
  /// Windows of `pool`, moved by `strides` (default: the pool size), with Valid or Same padding.
  /// ArgumentError for a pool size or stride that is not positive.
  explicit MaxPool2D(Size2 pool = {2, 2}, std::optional<Size2> strides = std::nullopt,
                     Padding padding = Padding::Valid);

  std::string type() const override { return "MaxPool2D"; }
  LayerConfig config() const override;
  bool rows_independent(bool /*training*/) const override { return true; }
  Shape build(const Shape& sample_shape) override;
  std::string kernel_info(int64_t batch, Device device) const override;
  bool fuse_input_relu_mask() override { return mask_input_relu_ = true; }
  /// The geometry build() computed, for a batch of `batch` rows.
  Pool2dShape geometry(int64_t batch) const {
    Pool2dShape g = g_;
    g.n = batch;
    return g;
  }

 protected:
  const Tensor& do_forward(const Tensor& x, bool training) override;
  const Tensor& do_backward(const Tensor& dy) override;

 private:
  Size2 pool_, strides_;
  Padding padding_;
  Pool2dShape g_;
  bool mask_input_relu_ = false;
  Shape in_shape_;
};

}  // namespace ember
