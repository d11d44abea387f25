// Dense layer.
#include "dense.h"

#include "../core/error.h"
#include "layer_config.h"
#include "ops/dense.h"
#include "ops/pointwise.h"

namespace ember {

Dense::Dense(int64_t units, Activation activation)
    : units_(units),
      activation_(activation),
      relu_(activation == Activation::ReLU),
      pointwise_(detail::pointwise_of(activation)) {
  EMBER_CHECK(units > 0, ArgumentError, "Dense: units must be > 0, got " + std::to_string(units));
}

Shape Dense::build(const Shape& in) {
  EMBER_CHECK((in.rank() == 1 || in.rank() == 2) && in.numel() > 0, ShapeError,
              "Dense: expects a per-sample input of 1 dimension (features) or 2 (time, features); given " + in.str() +
                  " (add a Flatten layer before it)");
  sample_ = in;
  in_ = in[in.rank() - 1];
  std::vector<int64_t> out(in.begin(), in.end());
  out.back() = units_;
  return Shape(out);
}

std::vector<ParamSpec> Dense::param_specs() const {
  return {{"kernel", Shape{units_, in_}, ParamSpec::Init::GlorotUniform, in_, units_},
          {"bias", Shape{units_}, ParamSpec::Init::Zeros, 0, 0}};
}

std::string Dense::kernel_info(int64_t batch, Device device) const {
  return detail::dense_kernel_info(device, batch, in_, units_) +
         (activation_ != Activation::None ? std::string("/") + activation_name(activation_) : "");
}

const Tensor& Dense::do_forward(const Tensor& x, bool /*training*/) {
  if (sample_.rank() <= 1) {
    EMBER_CHECK(x.rank() == 2 && x.dim(1) == in_, ShapeError,
                "Dense: expects input (N, " + std::to_string(in_) + "); given " + x.shape().str());
    return activate(detail::dense_forward(state_, x, params_.at(0), params_.at(1), relu_));
  }
  EMBER_CHECK(x.rank() == sample_.rank() + 1 && x.shape().without_batch() == sample_ && x.layout() == Layout::RowMajor,
              ShapeError, "Dense: expects row-major input (N, " + sample_.str().substr(1) + "; given " + x.str());
  const int64_t rows = x.numel() / in_;
  const Tensor& y = detail::dense_forward(state_, x.reshape(Shape{rows, in_}), params_.at(0), params_.at(1), relu_);
  std::vector<int64_t> out(x.shape().begin(), x.shape().end());
  out.back() = units_;
  y_ = y.reshape(Shape(out));
  return activate(y_);
}

// The activation other than ReLU, by the op of its own layer: the same bits as Dense then that layer.
const Tensor& Dense::activate(const Tensor& y) {
  return pointwise_ ? detail::pointwise_forward(activation_state_, *pointwise_, 0.0f, y) : y;
}

const Tensor& Dense::do_backward(const Tensor& output_grad) {
  const Tensor& dy =
      pointwise_ ? detail::pointwise_backward(activation_state_, *pointwise_, 0.0f, output_grad) : output_grad;
  const bool rows = sample_.rank() > 1;
  Tensor none;  // a frozen layer: no parameter gradient
  const bool train = trainable();
  const Tensor* dx = detail::dense_backward(
      state_, params_.at(0), rows ? dy.reshape(Shape{dy.numel() / units_, units_}) : dy,
      relu_ && !output_grad_premasked_, needs_input_grad(), train ? grads_.at(0) : none, train ? grads_.at(1) : none);
  if (!dx) return no_input_grad();
  if (!rows) return *dx;
  std::vector<int64_t> in(dy.shape().begin(), dy.shape().end());
  in.back() = in_;
  dx_ = dx->reshape(Shape(in));
  return dx_;
}

void Dense::do_release_buffers() {
  y_ = dx_ = Tensor();
  activation_state_.reset();
  Layer::do_release_buffers();
}

LayerConfig Dense::config() const {
  return {{"units", config_value(units_)}, {"activation", config_value(activation_)}};
}

}  // namespace ember
