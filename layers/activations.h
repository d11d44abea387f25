/// @file
/// Activation layers beyond ReLU, Keras' names and semantics:
/// @code{.unparsed}
///   Sigmoid(), Tanh()           elementwise, the input's shape and layout;
///   LeakyReLU(alpha = 0.3)      x for x > 0, alpha * x below (Keras' default slope);
///   GELU(approximate = false)   x Phi(x), or its tanh approximation (GPT-2's);
///   Softmax()                   over the features of (N, K) rows (Flatten first). As a model's
///                               last layer it gives probabilities to predict() while the loss is
///                               computed from its input, the logits (stable; Model does it).
/// @endcode
#pragma once

#include "activation.h"
#include "layer.h"

namespace ember {

/// The shared part of Sigmoid, Tanh, LeakyReLU and GELU.
class PointwiseActivation : public Layer {
 public:
  Shape build(const Shape& sample_shape) override { return sample_shape; }
  std::string kernel_info(int64_t, Device device) const override;

 protected:
  /// The activation `f`, with LeakyReLU's slope `alpha` (0 for the others).
  PointwiseActivation(detail::Pointwise f, float alpha) : f_(f), alpha_(alpha) {}
  const Tensor& do_forward(const Tensor& x, bool training) override;
  const Tensor& do_backward(const Tensor& dy) override;

  detail::Pointwise f_;  ///< which activation
  float alpha_;          ///< LeakyReLU's slope
};

/// Sigmoid: 1 / (1 + e^-x), elementwise; the input's shape and layout.
class Sigmoid : public PointwiseActivation {
 public:
  Sigmoid() : PointwiseActivation(detail::Pointwise::Sigmoid, 0.0f) {}
  std::string type() const override { return "Sigmoid"; }
  bool rows_independent(bool /*training*/) const override { return true; }
};

/// Tanh: tanh(x), elementwise; the input's shape and layout.
class Tanh : public PointwiseActivation {
 public:
  Tanh() : PointwiseActivation(detail::Pointwise::Tanh, 0.0f) {}
  std::string type() const override { return "Tanh"; }
  bool rows_independent(bool /*training*/) const override { return true; }
};

/// LeakyReLU(alpha = 0.3): x for x > 0, alpha * x below (Keras' default slope); the input's shape
/// and layout.
class LeakyReLU : public PointwiseActivation {
 public:
  /// alpha >= 0 and finite (ArgumentError else).
  explicit LeakyReLU(float alpha = 0.3f);
  std::string type() const override { return "LeakyReLU"; }
  bool rows_independent(bool /*training*/) const override { return true; }
  float alpha() const { return alpha_; }  ///< The slope below 0.
  LayerConfig config() const override;
};

/// GELU(approximate = false): x Phi(x) = x (1 + erf(x / sqrt(2))) / 2, Phi the standard normal
/// distribution function; approximate: x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2 (Keras'
/// gelu(x, approximate), PyTorch's GELU("none" / "tanh")). Elementwise; the input's shape and layout.
class GELU : public PointwiseActivation {
 public:
  /// The exact form, or with `approximate` the tanh form.
  explicit GELU(bool approximate = false)
      : PointwiseActivation(approximate ? detail::Pointwise::GeluTanh : detail::Pointwise::Gelu, 0.0f) {}
  std::string type() const override { return "GELU"; }
  bool rows_independent(bool /*training*/) const override { return true; }
  bool approximate() const { return f_ == detail::Pointwise::GeluTanh; }  ///< The tanh form.
  LayerConfig config() const override;
};

/// Softmax over the features of (N, K) rows (Flatten first). As a model's last layer it gives
/// probabilities to predict() while the loss is computed from its input, the logits.
class Softmax : public Layer {
 public:
  std::string type() const override { return "Softmax"; }
  bool rows_independent(bool /*training*/) const override { return true; }
  Shape build(const Shape& sample_shape) override;
  bool softmax_output() const override { return true; }

 protected:
  const Tensor& do_forward(const Tensor& x, bool training) override;
  const Tensor& do_backward(const Tensor& dy) override;

 private:
  Shape in_;
};

}  // namespace ember
