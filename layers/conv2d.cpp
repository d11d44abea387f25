// Conv2D layer: geometry and parameters; the backend is ops/conv2d.h's.
#include "conv2d.h"

#include "../core/error.h"
#include "layer_config.h"
#include "ops/conv2d.h"
#include "ops/pointwise.h"

namespace ember {

Conv2D::Conv2D(int64_t filters, Size2 kernel, Activation activation, Padding padding, Size2 strides, bool use_bias)
    : filters_(filters),
      kernel_(kernel),
      strides_(strides),
      activation_(activation),
      pointwise_(detail::pointwise_of(activation)),
      padding_(padding),
      use_bias_(use_bias) {
  EMBER_CHECK(filters > 0, ArgumentError, "Conv2D: filters must be > 0, got " + std::to_string(filters));
  EMBER_CHECK(kernel.h > 0 && kernel.w > 0, ArgumentError,
              "Conv2D: kernel size must be positive, got " + std::to_string(kernel.h) + "x" + std::to_string(kernel.w));
  EMBER_CHECK(strides.h > 0 && strides.w > 0, ArgumentError, "Conv2D: strides must be positive");
}

Shape Conv2D::build(const Shape& in) {
  g_ = Conv2dShape{};
  static_cast<WindowGeometry&>(g_) = window_geometry(in, kernel_, strides_, padding_, "Conv2D", "kernel");
  g_.k = filters_;
  g_.relu = activation_ == Activation::ReLU;
  return Shape{g_.k, g_.p, g_.q};
}

std::vector<ParamSpec> Conv2D::param_specs() const {
  const int64_t rs = g_.r * g_.s;
  std::vector<ParamSpec> specs{
      {"kernel", Shape{g_.k, g_.c, g_.r, g_.s}, ParamSpec::Init::GlorotUniform, g_.c * rs, g_.k * rs}};
  if (use_bias_) specs.push_back({"bias", Shape{g_.k}, ParamSpec::Init::Zeros, 0, 0});
  return specs;
}

void Conv2D::bind(std::vector<Tensor> params, std::vector<Tensor> grads) {
  Layer::bind(std::move(params), std::move(grads));
  if (use_bias_) return;
  const Device d = params_.at(0).device();  // on the parameters' device, again after a move
  zero_bias_ = Tensor::zeros(Shape{g_.k}, DType::F32, d);
  unused_bias_grad_ = Tensor::zeros(Shape{g_.k}, DType::F32, d);
}

Conv2dShape Conv2D::geometry(int64_t batch) const {
  Conv2dShape g = g_;
  g.n = batch;
  return g;
}

const Tensor& Conv2D::do_forward(const Tensor& x, bool /*training*/) {
  EMBER_CHECK(g_.k > 0, Error, "Conv2D: forward() before build()");
  EMBER_CHECK(x.rank() == 4 && x.shape().without_batch() == (Shape{g_.c, g_.h, g_.w}), ShapeError,
              "Conv2D: expects input (N, " + std::to_string(g_.c) + ", " + std::to_string(g_.h) + ", " +
                  std::to_string(g_.w) + "); given " + x.shape().str());
  batch_ = x.dim(0);
  const Tensor& y = detail::conv2d_forward(state_, geometry(batch_), x, params_.at(0), bias());
  // An activation other than ReLU, by the op of its own layer: the bits of Conv2D then that layer.
  return pointwise_ ? detail::pointwise_forward(activation_state_, *pointwise_, 0.0f, y) : y;
}

const Tensor& Conv2D::do_backward(const Tensor& output_grad) {
  const Tensor& dy =
      pointwise_ ? detail::pointwise_backward(activation_state_, *pointwise_, 0.0f, output_grad) : output_grad;
  Tensor none;  // a frozen layer: no parameter gradient
  const bool train = trainable();
  const Tensor* dx =
      detail::conv2d_backward(state_, geometry(batch_), params_.at(0), dy, needs_input_grad(),
                              train ? grads_.at(0) : none, train ? bias_grad() : none, output_grad_premasked_);
  return dx ? *dx : no_input_grad();
}

void Conv2D::do_release_buffers() {
  activation_state_.reset();
  Layer::do_release_buffers();
}

std::string Conv2D::kernel_info(int64_t batch, Device device) const {
  return detail::conv2d_kernel_info(geometry(batch), device) +
         (pointwise_ ? std::string(" + ember ") + activation_name(activation_) : "");
}

LayerConfig Conv2D::config() const {
  return {{"filters", config_value(filters_)},       {"kernel", config_value(kernel_)},
          {"activation", config_value(activation_)}, {"padding", config_value(padding_)},
          {"strides", config_value(strides_)},       {"use_bias", config_value(use_bias_)}};
}

}  // namespace ember
