// BatchNormalization layer.
#include "batch_normalization.h"

#include <cmath>

#include "../core/error.h"
#include "layer_config.h"
#include "ops/batchnorm.h"

namespace ember {

BatchNormalization::BatchNormalization(float momentum, float epsilon) : momentum_(momentum), epsilon_(epsilon) {
  EMBER_CHECK(std::isfinite(momentum) && momentum >= 0.0f && momentum < 1.0f, ArgumentError,
              "BatchNormalization: momentum must be in [0, 1), got " + std::to_string(momentum));
  EMBER_CHECK(std::isfinite(epsilon) && epsilon > 0.0f, ArgumentError,
              "BatchNormalization: epsilon must be > 0, got " + std::to_string(epsilon));
}

Shape BatchNormalization::build(const Shape& in) {
  EMBER_CHECK(in.rank() == 1 || in.rank() == 3, ShapeError,
              "BatchNormalization: expects (features,) or (channels, height, width) samples, got " + in.str());
  in_ = in;
  channels_ = in[0];
  return in;
}

std::vector<ParamSpec> BatchNormalization::param_specs() const {
  return {ParamSpec{.name = "gamma", .shape = Shape{channels_}, .init = ParamSpec::Init::Ones},
          ParamSpec{.name = "beta", .shape = Shape{channels_}, .init = ParamSpec::Init::Zeros}};
}

std::vector<StateSpec> BatchNormalization::state_specs() const {
  return {StateSpec{.name = "moving_mean", .shape = Shape{channels_}, .init = 0.0f},
          StateSpec{.name = "moving_variance", .shape = Shape{channels_}, .init = 1.0f}};
}

namespace {
detail::BatchNormArgs args(const std::vector<Tensor>& params, std::vector<Tensor>& state, float momentum, float eps) {
  return {&params.at(0), &params.at(1), &state.at(0), &state.at(1), 1.0f - momentum, eps};
}
}  // namespace

const Tensor& BatchNormalization::do_forward(const Tensor& x, bool training) {
  EMBER_CHECK(channels_ > 0, Error, "BatchNormalization: forward() before build()");
  EMBER_CHECK(state_tensors_.size() == 2 && params_.size() == 2, Error,
              "BatchNormalization: bind() and bind_state() first (Model::build does)");
  EMBER_CHECK(x.rank() == in_.rank() + 1 && x.shape().without_batch() == in_, ShapeError,
              "BatchNormalization: expects input (N, ...) with samples " + in_.str() + "; given " + x.shape().str());
  // Frozen: inference mode, the moving statistics normalise and stay (Keras' trainable = False).
  return detail::batchnorm_forward(state_, args(params_, state_tensors_, momentum_, epsilon_), x,
                                   training && trainable());
}

const Tensor& BatchNormalization::do_backward(const Tensor& dy) {
  Tensor none;  // a frozen layer: no parameter gradient
  const bool train = trainable();
  const Tensor& dx = detail::batchnorm_backward(state_, args(params_, state_tensors_, momentum_, epsilon_), dy,
                                                train ? grads_.at(0) : none, train ? grads_.at(1) : none);
  return needs_input_grad() ? dx : no_input_grad();
}

std::string BatchNormalization::kernel_info(int64_t, Device device) const {
  return device.is_cuda() ? (in_.rank() == 3 ? "cuDNN batch norm (spatial)" : "cuDNN batch norm (per activation)")
                          : "ember cpu batch norm (NHWC, fixed-order sums)";
}

LayerConfig BatchNormalization::config() const {
  return {{"momentum", config_value(momentum_)}, {"epsilon", config_value(epsilon_)}};
}

}  // namespace ember
