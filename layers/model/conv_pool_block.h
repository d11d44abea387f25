// A Conv2D -> MaxPool2D pair that Model runs as one fused pass on the CPU
// (cpu/conv2d_maxpool.h: the convolution's output never exists in memory). Private to the library.
//
// Model makes one per fusable pair at build (make() says which pairs fuse); on the CPU its
// forward/backward replace the two layers' (the layers' own stay untouched and keep working on
// their own, as in a custom loop or on a GPU). The results equal the unfused pair's up to the
// order of the convolution's float sums.
#pragma once

#include <memory>
#include <string>

#include "../../core/tensor.h"
#include "../conv2d.h"
#include "../maxpool2d.h"

namespace ember::detail {

class ConvPoolBlock {
 public:
  // The block for `first` -> `second` when they are a Conv2D and a MaxPool2D that fuse on the
  // CPU (cpu::conv2d_maxpool_fits, and the convolution's input gradient is not wanted); else null.
  static std::unique_ptr<ConvPoolBlock> make(Layer& first, Layer& second);

  // pool(conv(x)) for x on the CPU, (N, C, H, W) row-major or NHWC; x is kept (shallowly) for backward.
  const Tensor& forward(const Tensor& x, bool training);
  // Writes (=) the convolution's kernel and bias gradients from the pool output's gradient.
  void backward(const Tensor& dy);
  // As Layer::release_buffers (the pair's own buffers; the two layers' are theirs).
  void release_buffers();
  // Whether it may run now: the convolution's input gradient is still not wanted (a custom loop
  // may ask for it after build; then the layers run on their own).
  bool usable() const { return !conv_.needs_input_grad(); }
  // For placement_report: what runs the pair.
  std::string kernel_info() const;

 private:
  ConvPoolBlock(Conv2D& conv, MaxPool2D& pool) : conv_(conv), pool_(pool) {}
  Conv2D& conv_;
  MaxPool2D& pool_;
  Tensor x_, y_, argmax_, dy_copy_, scratch_;
  int64_t batch_ = 0;
  bool trained_ = false;  // the last forward was a training one (argmax_ is its)
};

}  // namespace ember::detail
