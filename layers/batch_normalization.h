/// @file
/// BatchNormalization(momentum = 0.99, epsilon = 1e-3): Keras' defaults and semantics. Per
/// channel of (C, H, W) samples (after a convolution) or per feature of (F,) samples (after
/// Dense). Training normalises with the batch's mean and (biased) variance and moves the running
/// statistics: moving = momentum * moving + (1 - momentum) * batch (the variance's with Bessel's
/// correction, as cuDNN and PyTorch keep it); evaluation and predict use the running statistics.
///
/// Parameters gamma (ones) and beta (zeros) are trained; moving_mean (zeros) and moving_variance
/// (ones) are non-trainable state in the model's state buffer, saved in checkpoints. Under a
/// data-parallel strategy each replica normalises with its own shard's statistics (Keras'
/// default) and the replicas' running statistics are averaged after every step, so they stay
/// identical on every replica.
#pragma once

#include "layer.h"

namespace ember {

/// Batch normalisation per channel or feature, Keras' semantics (see batch_normalization.h).
class BatchNormalization : public Layer {
 public:
  /// 0 <= momentum < 1; epsilon > 0 (ArgumentError else).
  explicit BatchNormalization(float momentum = 0.99f, float epsilon = 1e-3f);
  std::string type() const override { return "BatchNormalization"; }
  bool rows_independent(bool training) const override { return !training || !trainable(); }
  Shape build(const Shape& sample_shape) override;
  std::vector<ParamSpec> param_specs() const override;
  std::vector<StateSpec> state_specs() const override;
  std::string kernel_info(int64_t, Device device) const override;
  float momentum() const { return momentum_; }  ///< The running statistics' momentum.
  LayerConfig config() const override;
  float epsilon() const { return epsilon_; }  ///< Added to the variance before its square root.

 protected:
  const Tensor& do_forward(const Tensor& x, bool training) override;
  const Tensor& do_backward(const Tensor& dy) override;

 private:
  float momentum_, epsilon_;
  Shape in_;
  int64_t channels_ = 0;
};

}  // namespace ember
