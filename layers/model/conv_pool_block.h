// A Conv2D -> MaxPool2D pair run as one fused step on the CPU (cpu/conv2d_maxpool.h: the
// convolution's output never exists in memory): a rewrite of the execution plan (plan.h).
// Private to the library.
//
// The plan makes one per fusable pair at build (make() says which pairs fuse); on the CPU its
// forward/backward replace the two layers' (the layers' own stay untouched and keep working on
// their own, as in a custom loop or on a GPU). The results equal the unfused pair's up to the
// order of the convolution's float sums.
#pragma once

#include <memory>
#include <string>

#include "../../core/tensor.h"
#include "../conv2d.h"
#include "../maxpool2d.h"
#include "step.h"

namespace ember::detail {

class ConvPoolBlock final : public Step {
 public:
  // The step for `first` -> `second` (layers i and i + 1) when they are a Conv2D and a MaxPool2D
  // that fuse on the CPU (cpu::conv2d_maxpool_fits, and the convolution's input gradient is not
  // wanted); else null.
  static std::unique_ptr<ConvPoolBlock> make(Layer& first, Layer& second, size_t i);

  // pool(conv(x)) for x on the CPU, (N, C, H, W) row-major or NHWC; x is kept (shallowly) for backward.
  const Tensor& forward(const std::vector<const Tensor*>& inputs, bool training) override;
  // Writes (=) the convolution's kernel and bias gradients from the pool output's gradient; the
  // input's gradient is not computed (undefined).
  std::span<const Tensor> backward(const Tensor& dy) override;
  // The pair's own buffers and the two layers'.
  void release_buffers() override;
  // Whether it may run now: the convolution's input gradient is still not wanted (a custom loop
  // may ask for it after build; then the layers run on their own).
  bool usable() const override { return !conv_.needs_input_grad(); }
  std::string kernel_info(int64_t batch, Device device) const override;

 private:
  ConvPoolBlock(Conv2D& conv, MaxPool2D& pool, size_t i) : Step(i, i + 1), conv_(conv), pool_(pool) {}
  Conv2D& conv_;
  MaxPool2D& pool_;
  Tensor x_, y_, argmax_, dy_copy_, scratch_;
  Tensor dx_;  // the input gradient: never computed (undefined)
  int64_t batch_ = 0;
  bool trained_ = false;  // the last forward was a training one (argmax_ is its)
};

}  // namespace ember::detail
