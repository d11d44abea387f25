/// @file
/// Flatten: (N, C, H, W) -> (N, C*H*W) in the public NCHW order (PyTorch's order; so a model's
/// Dense weights do not depend on the layout a backend kept internally). An NHWC input is
/// converted; a row-major input is only reshaped. The backward reshapes back (row-major).
#pragma once

#include "layer.h"

namespace ember {

/// (N, C, H, W) -> (N, C*H*W) in the public NCHW order (see flatten.h).
class Flatten : public Layer {
 public:
  std::string type() const override { return "Flatten"; }
  bool rows_independent(bool /*training*/) const override { return true; }
  Shape build(const Shape& sample_shape) override;
  std::string kernel_info(int64_t, Device device) const override {
    return device.is_cuda() ? "reshape" : "reshape (NHWC inputs reordered to NCHW)";
  }

 protected:
  const Tensor& do_forward(const Tensor& x, bool training) override;
  const Tensor& do_backward(const Tensor& dy) override;
  void do_release_buffers() override;

 private:
  Shape in_;
  Tensor rowmajor_, y_, dx_;
};

}  // namespace ember
