// The fused Conv2D -> MaxPool2D pair (see the header).
#include "conv_pool_block.h"

#include <typeinfo>

#include "../../core/error.h"
#include "../cpu/conv2d_bf16.h"
#include "../cpu/conv2d_maxpool.h"
#include "../cpu/conv2d_maxpool_bf16.h"
#include "../ops/conv2d.h"

namespace ember::detail {

std::unique_ptr<ConvPoolBlock> ConvPoolBlock::make(Layer& first, Layer& second, size_t i) {
  // Exactly these two classes: a subclass may override what the fused pass would skip.
  if (typeid(first) != typeid(Conv2D) || typeid(second) != typeid(MaxPool2D)) return nullptr;
  auto* conv = static_cast<Conv2D*>(&first);
  auto* pool = static_cast<MaxPool2D*>(&second);
  if (conv->params().empty()) return nullptr;
  // The fused pass applies ReLU or nothing between the convolution and the pool.
  if (conv->activation() != Activation::None && conv->activation() != Activation::ReLU) return nullptr;
  const Conv2dShape cg = conv->geometry(1);
  const Pool2dShape pg = pool->geometry(1);
  if (!conv->needs_input_grad() && cpu::conv2d_maxpool_fits(cg, pg))
    return std::unique_ptr<ConvPoolBlock>(new ConvPoolBlock(*conv, *pool, i, false));
  // A convolution that runs in bf16 under mixed_bf16 (conv2d_runs_bf16), unless the fp32 pair above
  // took it (27 < C*R*S <= 32 with no input gradient wanted: fp32 in either policy).
  if (cg.c * cg.r * cg.s > 27 && cpu::conv2d_maxpool_bf16_fits(cg, pg))
    return std::unique_ptr<ConvPoolBlock>(new ConvPoolBlock(*conv, *pool, i, true));
  return nullptr;
}

bool ConvPoolBlock::usable() const { return bf16_ ? conv2d_runs_bf16(conv_.geometry(1)) : !conv_.needs_input_grad(); }

const Tensor& ConvPoolBlock::forward(const std::vector<const Tensor*>& inputs, bool training) {
  const Tensor& x = *inputs[0];
  const Conv2dShape cg = conv_.geometry(x.dim(0));
  const Pool2dShape pg = pool_.geometry(x.dim(0));
  batch_ = x.dim(0);
  x_ = x;
  ensure(y_, Shape{batch_, pg.c, pg.p, pg.q}, DType::F32, Device::cpu(), Layout::NHWC);
  if (training) ensure(argmax_, y_.shape(), DType::U8, Device::cpu(), Layout::NHWC);
  if (bf16_)
    cpu::conv2d_maxpool_bf16_forward(cg, pg, as_layout(x, Layout::NHWC, scratch_), conv_.params()[0], conv_.bias(), y_,
                                     training ? &argmax_ : nullptr, keep_);
  else
    cpu::conv2d_maxpool_forward(cg, pg, x, conv_.params()[0], conv_.bias(), y_, training ? &argmax_ : nullptr,
                                scratch_);
  trained_ = training;
  return y_;
}

std::span<const Tensor> ConvPoolBlock::backward(const Tensor& dy) {
  EMBER_CHECK(trained_ && x_.defined(), Error,
              "layers '" + conv_.name() + "' + '" + pool_.name() + "': backward needs a training forward first");
  EMBER_CHECK(
      dy.shape() == y_.shape(), ShapeError,
      "layer '" + pool_.name() + "': the output gradient must be " + y_.shape().str() + ", got " + dy.shape().str());
  if (bf16_) return backward_bf16(dy);
  Tensor dw = conv_.grads()[0], db = conv_.bias_grad();  // views of the model's gradient buffer (or scratch)
  cpu::conv2d_maxpool_backward(conv_.geometry(batch_), pool_.geometry(batch_), x_, y_, argmax_,
                               as_layout(dy, Layout::NHWC, dy_copy_), dw, db, scratch_);
  return {&no_dx_, 1};
}

std::span<const Tensor> ConvPoolBlock::backward_bf16(const Tensor& dy) {
  const Conv2dShape cg = conv_.geometry(batch_);
  const bool want_dx = conv_.needs_input_grad(), train = conv_.trainable();
  if (!train && !want_dx) return {&no_dx_, 1};  // frozen, and nothing before it trains
  if (!train) {
    ensure(dw_unused_, conv_.params()[0].shape(), DType::F32, Device::cpu());
    ensure(db_unused_, Shape{cg.k}, DType::F32, Device::cpu());
  }
  Tensor dw = train ? conv_.grads()[0] : dw_unused_, db = train ? conv_.bias_grad() : db_unused_;
  if (want_dx) ensure(dx_, x_.shape(), DType::F32, Device::cpu(), Layout::NHWC);
  cpu::conv2d_maxpool_bf16_backward(cg, pool_.geometry(batch_), conv_.params()[0], y_, argmax_,
                                    as_layout(dy, Layout::NHWC, dy_copy_), want_dx ? &dx_ : nullptr, dw, db, keep_);
  return {want_dx ? &dx_ : &no_dx_, 1};
}

void ConvPoolBlock::release_buffers() {
  x_ = y_ = argmax_ = dy_copy_ = scratch_ = dx_ = dw_unused_ = db_unused_ = Tensor();
  keep_ = cpu::Bf16Buffers();
  trained_ = false;
  conv_.release_buffers();
  pool_.release_buffers();
}

std::string ConvPoolBlock::kernel_info(int64_t batch, Device /*device*/) const {
  if (bf16_)
    return cpu::conv2d_bf16_kernel_info(conv_.geometry(batch), /*out16=*/true) +
           " + ember bf16 max-pool, fused with '" + pool_.name() +
           "' (the convolution's output and its gradient in bf16 only)";
  return "ember cpu conv+" + std::string(conv_.relu_output() ? "ReLU+" : "") + "max-pool, fused with '" + pool_.name() +
         "' (one pass per image; the convolution's output is never stored)";
}

}  // namespace ember::detail
