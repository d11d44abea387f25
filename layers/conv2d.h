/// @file
/// Conv2D: Keras-like 2-D convolution with bias and an optional fused ReLU.
/// @code{.unparsed}
///   Conv2D(32, {3, 3}, Activation::ReLU)                     valid padding, stride 1
///   Conv2D(64, {3, 3}, Activation::ReLU, Padding::Same)      output keeps the input size
///   Conv2D(64, {1, 1}, Activation::None, Padding::Valid, {2, 2}, false)
///                                                            strided 1x1, no bias (a projection)
/// @endcode
/// Parameters: "kernel" (K, C, R, S) Glorot-uniform, "bias" (K) zeros unless use_bias is false
/// (Keras' use_bias=False: no bias parameter; the backends then add a constant zero bias, exact).
/// Input (N, C, H, W) in any layout; output (N, K, P, Q) in the layout the backend runs in
/// (NHWC on the CPU, NCHW on a GPU; layers/ops/conv2d.h).
#pragma once

#include "activation.h"
#include "geometry.h"
#include "layer.h"

namespace ember {

/// A 2-D convolution with bias and an optional activation (ReLU fused; see Activation).
class Conv2D : public Layer {
 public:
  /// `filters` output channels (K), a `kernel` window (R x S), the `activation`, `padding`,
  /// `strides` and whether there is a bias parameter. ArgumentError for a filter count, kernel size
  /// or stride that is not positive.
  Conv2D(int64_t filters, Size2 kernel, Activation activation = Activation::None, Padding padding = Padding::Valid,
         Size2 strides = {1, 1}, bool use_bias = true);

  std::string type() const override { return "Conv2D"; }
  LayerConfig config() const override;
  bool rows_independent(bool /*training*/) const override { return true; }
  Shape build(const Shape& sample_shape) override;
  std::vector<ParamSpec> param_specs() const override;
  std::string kernel_info(int64_t batch, Device device) const override;
  bool relu_output() const override { return activation_ == Activation::ReLU; }
  /// The geometry build() computed, for a batch of `batch` rows.
  Conv2dShape geometry(int64_t batch) const;
  bool use_bias() const { return use_bias_; }            ///< Whether the layer has a "bias" parameter.
  Activation activation() const { return activation_; }  ///< What the layer applies to its output.
  void bind(std::vector<Tensor> params, std::vector<Tensor> grads) override;
  /// The bias the backends add and its gradient: the parameter's views, or without use_bias a
  /// zero bias of the layer's own and a gradient nobody reads.
  ///@{
  const Tensor& bias() const { return use_bias_ ? params_.at(1) : zero_bias_; }
  Tensor& bias_grad() { return use_bias_ ? grads_.at(1) : unused_bias_grad_; }
  ///@}

 protected:
  const Tensor& do_forward(const Tensor& x, bool training) override;
  const Tensor& do_backward(const Tensor& dy) override;

 private:
  void do_release_buffers() override;

  int64_t filters_;
  Size2 kernel_, strides_;
  Activation activation_;
  std::optional<detail::Pointwise> pointwise_;         // an activation other than ReLU, on the output
  std::unique_ptr<detail::OpState> activation_state_;  // its op's state
  Padding padding_;
  bool use_bias_;
  Tensor zero_bias_, unused_bias_grad_;  // without use_bias
  Conv2dShape g_;                        // per-sample geometry from build(); n is set per batch
  int64_t batch_ = 0;                    // of the last forward
};

}  // namespace ember
