/// @file
/// LayerNormalization(epsilon = 1e-3): Keras' layer (axis -1, center and scale) and PyTorch's
/// LayerNorm over the last dimension. Each sample's rows of features, (features,) or (time,
/// features), are normalised on their own: y = (x - mean) / sqrt(var + epsilon) * gamma + beta,
/// mean and the biased variance over the row's features. The same in training and inference (no
/// running statistics), so rows never mix: the batch may be sliced.
///
/// Parameters gamma (ones) and beta (zeros), one per feature; their gradients sum over the
/// batch's rows in its sum order (core/pairwise_sum.h), as Dense's. Statistics and sums in f32,
/// in fixed lanes (layers/layernorm_math.h): the same bits at any thread count.
#pragma once

#include "layer.h"

namespace ember {

/// Normalisation over the last axis, Keras' semantics (see layer_normalization.h).
class LayerNormalization : public Layer {
 public:
  /// epsilon > 0 (ArgumentError else): Keras' default 1e-3; PyTorch's LayerNorm uses 1e-5.
  explicit LayerNormalization(float epsilon = 1e-3f);
  std::string type() const override { return "LayerNormalization"; }
  bool rows_independent(bool /*training*/) const override { return true; }
  Shape build(const Shape& sample_shape) override;
  std::vector<ParamSpec> param_specs() const override;
  std::string kernel_info(int64_t, Device device) const override;
  LayerConfig config() const override;
  float epsilon() const { return epsilon_; }  ///< Added to the variance before its square root.

 protected:
  const Tensor& do_forward(const Tensor& x, bool training) override;
  const Tensor& do_backward(const Tensor& dy) override;

 private:
  float epsilon_;
  Shape in_;
  int64_t features_ = 0;
};

}  // namespace ember
