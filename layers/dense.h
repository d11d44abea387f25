/// @file
/// Dense: fully connected, y = act(x W^T + b).  Dense(64, Activation::ReLU), Dense(10).
/// Parameters: "kernel" (units, in) Glorot-uniform, "bias" (units) zeros.
/// Input (N, in) row-major; output (N, units) row-major. As Keras' Dense on the last axis of a
/// sequence too: (N, T, in) -> (N, T, units), each of the N * T rows its own; the rows then are
/// what the weight gradient sums, in the batch's sum order (docs/numerics.md). Images (C, H, W)
/// need a Flatten first: their last axis is the width (NCHW), not Keras' channels.
#pragma once

#include "activation.h"
#include "layer.h"

namespace ember {

/// A fully connected layer, y = act(x W^T + b) (see dense.h).
class Dense : public Layer {
 public:
  /// `units` outputs, then `activation` (ReLU fused into the kernels; see Activation). ArgumentError
  /// unless units > 0.
  explicit Dense(int64_t units, Activation activation = Activation::None);

  std::string type() const override { return "Dense"; }
  bool rows_independent(bool /*training*/) const override { return true; }
  Shape build(const Shape& sample_shape) override;
  std::vector<ParamSpec> param_specs() const override;
  bool relu_output() const override { return relu_; }
  LayerConfig config() const override;
  std::string kernel_info(int64_t batch, Device device) const override;

 protected:
  const Tensor& do_forward(const Tensor& x, bool training) override;
  const Tensor& do_backward(const Tensor& dy) override;

 private:
  void do_release_buffers() override;
  const Tensor& activate(const Tensor& y);

  int64_t units_, in_ = 0;
  Activation activation_;
  bool relu_;
  std::optional<detail::Pointwise> pointwise_;         // an activation other than ReLU, on the output
  std::unique_ptr<detail::OpState> activation_state_;  // its op's state
  Shape sample_;   // the per-sample input shape (rank > 1: the leading axes are rows)
  Tensor y_, dx_;  // a sample of rank > 1: the op's 2-D output and input gradient, reshaped
};

}  // namespace ember
