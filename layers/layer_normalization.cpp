// LayerNormalization layer.
#include "layer_normalization.h"

#include <cmath>

#include "../core/error.h"
#include "layer_config.h"
#include "ops/layernorm.h"

namespace ember {

LayerNormalization::LayerNormalization(float epsilon) : epsilon_(epsilon) {
  EMBER_CHECK(std::isfinite(epsilon) && epsilon > 0.0f, ArgumentError,
              "LayerNormalization: epsilon must be > 0, got " + std::to_string(epsilon));
}

Shape LayerNormalization::build(const Shape& in) {
  EMBER_CHECK(in.rank() >= 1 && in.numel() > 0, ShapeError,
              "LayerNormalization: expects per-sample input (features,) or (time, features), got " + in.str());
  in_ = in;
  features_ = in[in.rank() - 1];
  return in;
}

std::vector<ParamSpec> LayerNormalization::param_specs() const {
  return {ParamSpec{.name = "gamma", .shape = Shape{features_}, .init = ParamSpec::Init::Ones},
          ParamSpec{.name = "beta", .shape = Shape{features_}, .init = ParamSpec::Init::Zeros}};
}

const Tensor& LayerNormalization::do_forward(const Tensor& x, bool /*training*/) {
  EMBER_CHECK(features_ > 0, Error, "LayerNormalization: forward() before build()");
  EMBER_CHECK(params_.size() == 2, Error, "LayerNormalization: bind() first (Model::build does)");
  EMBER_CHECK(x.rank() == in_.rank() + 1 && x.shape().without_batch() == in_, ShapeError,
              "LayerNormalization: expects input (N, ...) with samples " + in_.str() + "; given " + x.shape().str());
  return detail::layernorm_forward(state_, params_[0], params_[1], epsilon_, x);
}

const Tensor& LayerNormalization::do_backward(const Tensor& dy) {
  const Tensor* dx =
      detail::layernorm_backward(state_, params_.at(0), dy, needs_input_grad(), grads_.at(0), grads_.at(1));
  return dx ? *dx : no_input_grad();
}

std::string LayerNormalization::kernel_info(int64_t, Device device) const {
  return device.is_cuda() ? "ember CUDA layer norm (a thread per row)" : "ember cpu layer norm (fixed-lane sums)";
}

LayerConfig LayerNormalization::config() const { return {{"epsilon", config_value(epsilon_)}}; }

}  // namespace ember
