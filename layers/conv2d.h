// Conv2D: Keras-like 2-D convolution with bias and an optional fused ReLU.
//   Conv2D(32, {3, 3}, Activation::ReLU)                     valid padding, stride 1
//   Conv2D(64, {3, 3}, Activation::ReLU, Padding::Same)      output keeps the input size
// Parameters: "kernel" (K, C, R, S) Glorot-uniform, "bias" (K) zeros.
// Input (N, C, H, W) in any layout; output (N, K, P, Q) in the layout the backend runs in
// (NHWC on the CPU, NCHW on a GPU; layers/ops/conv2d.h).
#pragma once

#include "activation.h"
#include "geometry.h"
#include "layer.h"

namespace ember {

class Conv2D : public Layer {
 public:
  Conv2D(int64_t filters, Size2 kernel, Activation activation = Activation::None, Padding padding = Padding::Valid,
         Size2 strides = {1, 1});

  std::string type() const override { return "Conv2D"; }
  bool rows_independent(bool /*training*/) const override { return true; }
  Shape build(const Shape& sample_shape) override;
  std::vector<ParamSpec> param_specs() const override;
  std::string kernel_info(int64_t batch, Device device) const override;
  bool relu_output() const override { return activation_ == Activation::ReLU; }
  // The geometry build() computed, for a batch of `batch` rows.
  Conv2dShape geometry(int64_t batch) const;

 protected:
  const Tensor& do_forward(const Tensor& x, bool training) override;
  const Tensor& do_backward(const Tensor& dy) override;

 private:
  int64_t filters_;
  Size2 kernel_, strides_;
  Activation activation_;
  Padding padding_;
  Conv2dShape g_;      // per-sample geometry from build(); n is set per batch
  int64_t batch_ = 0;  // of the last forward
};

}  // namespace ember
