// Dense layer.
#include "dense.h"

#include "../core/error.h"
#include "layer_config.h"
#include "ops/dense.h"

namespace ember {

Dense::Dense(int64_t units, Activation activation) : units_(units), relu_(activation == Activation::ReLU) {
  EMBER_CHECK(units > 0, ArgumentError, "Dense: units must be > 0, got " + std::to_string(units));
}

Shape Dense::build(const Shape& in) {
  EMBER_CHECK(in.rank() == 1, ShapeError,
              "Dense: expects a per-sample input of 1 dimension (features); given " + in.str() +
                  " (add a Flatten layer before it)");
  in_ = in[0];
  return Shape{units_};
}

std::vector<ParamSpec> Dense::param_specs() const {
  return {{"kernel", Shape{units_, in_}, ParamSpec::Init::GlorotUniform, in_, units_},
          {"bias", Shape{units_}, ParamSpec::Init::Zeros, 0, 0}};
}

const Tensor& Dense::do_forward(const Tensor& x, bool /*training*/) {
  EMBER_CHECK(x.rank() == 2 && x.dim(1) == in_, ShapeError,
              "Dense: expects input (N, " + std::to_string(in_) + "); given " + x.shape().str());
  return detail::dense_forward(state_, x, params_.at(0), params_.at(1), relu_);
}

const Tensor& Dense::do_backward(const Tensor& dy) {
  const Tensor* dx = detail::dense_backward(state_, params_.at(0), dy, relu_ && !output_grad_premasked_,
                                            needs_input_grad_, grads_.at(0), grads_.at(1));
  return dx ? *dx : no_input_grad();
}

LayerConfig Dense::config() const {
  return {{"units", config_value(units_)}, {"activation", config_value(relu_ ? Activation::ReLU : Activation::None)}};
}

}  // namespace ember
