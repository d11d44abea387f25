/// @file
/// ReLU as a layer of its own (Conv2D and Dense can also fuse it: Activation::ReLU).
/// Output has the input's shape and layout.
#pragma once

#include "layer.h"

namespace ember {

/// max(x, 0), elementwise: the output has the input's shape and layout.
class ReLU : public Layer {
 public:
  std::string type() const override { return "ReLU"; }
  bool rows_independent(bool /*training*/) const override { return true; }
  Shape build(const Shape& sample_shape) override { return sample_shape; }
  bool relu_output() const override { return true; }

 protected:
  const Tensor& do_forward(const Tensor& x, bool training) override;
  const Tensor& do_backward(const Tensor& dy) override;

 private:
};

}  // namespace ember
