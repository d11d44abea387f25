/// @file
/// Dense: fully connected, y = act(x W^T + b).  Dense(64, Activation::ReLU), Dense(10).
/// Parameters: "kernel" (units, in) Glorot-uniform, "bias" (units) zeros.
/// Input (N, in) row-major; output (N, units) row-major.
#pragma once

#include "activation.h"
#include "layer.h"

namespace ember {

/// A fully connected layer, y = act(x W^T + b) (see dense.h).
class Dense : public Layer {
 public:
  /// `units` outputs, then the fused `activation`. ArgumentError unless units > 0.
  explicit Dense(int64_t units, Activation activation = Activation::None);

  std::string type() const override { return "Dense"; }
  bool rows_independent(bool /*training*/) const override { return true; }
  Shape build(const Shape& sample_shape) override;
  std::vector<ParamSpec> param_specs() const override;
  bool relu_output() const override { return relu_; }
  LayerConfig config() const override;
  std::string kernel_info(int64_t, Device device) const override {
    return std::string(device.is_cuda() ? "cuBLAS sgemm + ember kernel bias" : "oneDNN sgemm + ember bias") +
           (relu_ ? "/relu" : "");
  }

 protected:
  const Tensor& do_forward(const Tensor& x, bool training) override;
  const Tensor& do_backward(const Tensor& dy) override;

 private:
  int64_t units_, in_ = 0;
  bool relu_;
};

}  // namespace ember
