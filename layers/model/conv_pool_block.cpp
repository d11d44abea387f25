// The fused Conv2D -> MaxPool2D pair (see the header).
#include "conv_pool_block.h"

#include <typeinfo>

#include "../../core/error.h"
#include "../cpu/conv2d_maxpool.h"

namespace ember::detail {

std::unique_ptr<ConvPoolBlock> ConvPoolBlock::make(Layer& first, Layer& second, size_t i) {
  // Exactly these two classes: a subclass may override what the fused pass would skip.
  if (typeid(first) != typeid(Conv2D) || typeid(second) != typeid(MaxPool2D)) return nullptr;
  auto* conv = static_cast<Conv2D*>(&first);
  auto* pool = static_cast<MaxPool2D*>(&second);
  if (conv->needs_input_grad() || conv->params().empty()) return nullptr;
  // The fused pass applies ReLU or nothing between the convolution and the pool.
  if (conv->activation() != Activation::None && conv->activation() != Activation::ReLU) return nullptr;
  if (!cpu::conv2d_maxpool_fits(conv->geometry(1), pool->geometry(1))) return nullptr;
  return std::unique_ptr<ConvPoolBlock>(new ConvPoolBlock(*conv, *pool, i));
}

const Tensor& ConvPoolBlock::forward(const std::vector<const Tensor*>& inputs, bool training) {
  const Tensor& x = *inputs[0];
  const Conv2dShape cg = conv_.geometry(x.dim(0));
  const Pool2dShape pg = pool_.geometry(x.dim(0));
  batch_ = x.dim(0);
  x_ = x;
  ensure(y_, Shape{batch_, pg.c, pg.p, pg.q}, DType::F32, Device::cpu(), Layout::NHWC);
  if (training) ensure(argmax_, y_.shape(), DType::U8, Device::cpu(), Layout::NHWC);
  cpu::conv2d_maxpool_forward(cg, pg, x, conv_.params()[0], conv_.bias(), y_, training ? &argmax_ : nullptr, scratch_);
  trained_ = training;
  return y_;
}

std::span<const Tensor> ConvPoolBlock::backward(const Tensor& dy) {
  EMBER_CHECK(trained_ && x_.defined(), Error,
              "layers '" + conv_.name() + "' + '" + pool_.name() + "': backward needs a training forward first");
  EMBER_CHECK(
      dy.shape() == y_.shape(), ShapeError,
      "layer '" + pool_.name() + "': the output gradient must be " + y_.shape().str() + ", got " + dy.shape().str());
  Tensor dw = conv_.grads()[0], db = conv_.bias_grad();  // views of the model's gradient buffer (or scratch)
  cpu::conv2d_maxpool_backward(conv_.geometry(batch_), pool_.geometry(batch_), x_, y_, argmax_,
                               as_layout(dy, Layout::NHWC, dy_copy_), dw, db, scratch_);
  return {&dx_, 1};
}

void ConvPoolBlock::release_buffers() {
  x_ = y_ = argmax_ = dy_copy_ = scratch_ = Tensor();
  trained_ = false;
  conv_.release_buffers();
  pool_.release_buffers();
}

std::string ConvPoolBlock::kernel_info(int64_t /*batch*/, Device /*device*/) const {
  return "ember cpu conv+" + std::string(conv_.relu_output() ? "ReLU+" : "") + "max-pool, fused with '" + pool_.name() +
         "' (one pass per image; the convolution's output is never stored)";
}

}  // namespace ember::detail
