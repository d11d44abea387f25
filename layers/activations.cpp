// Sigmoid, Tanh, LeakyReLU, GELU and Softmax layers.
#include "activations.h"

#include <cmath>

#include "../core/error.h"
#include "layer_config.h"
#include "ops/pointwise.h"
#include "ops/softmax.h"

namespace ember {

const Tensor& PointwiseActivation::do_forward(const Tensor& x, bool /*training*/) {
  return detail::pointwise_forward(state_, f_, alpha_, x);
}

const Tensor& PointwiseActivation::do_backward(const Tensor& dy) {
  if (!needs_input_grad()) return no_input_grad();
  return detail::pointwise_backward(state_, f_, alpha_, dy);
}

std::string PointwiseActivation::kernel_info(int64_t, Device device) const {
  return device.is_cuda() ? "ember CUDA elementwise kernel" : "ember cpu elementwise loop (any layout)";
}

LeakyReLU::LeakyReLU(float alpha) : PointwiseActivation(detail::Pointwise::LeakyReLU, alpha) {
  EMBER_CHECK(std::isfinite(alpha) && alpha >= 0.0f, ArgumentError,
              "LeakyReLU: alpha must be finite and >= 0, got " + std::to_string(alpha));
}

Shape Softmax::build(const Shape& in) {
  EMBER_CHECK(in.rank() == 1, ShapeError,
              "Softmax: works over the features of (features,) samples; got " + in.str() + " (Flatten first)");
  in_ = in;
  return in;
}

const Tensor& Softmax::do_forward(const Tensor& x, bool /*training*/) {
  EMBER_CHECK(x.rank() == 2 && x.dim(1) == in_[0], ShapeError,
              "Softmax: expects input (N, " + std::to_string(in_[0]) + "); given " + x.shape().str());
  return detail::softmax_forward(state_, x);
}

const Tensor& Softmax::do_backward(const Tensor& dy) {
  if (!needs_input_grad()) return no_input_grad();
  return detail::softmax_backward(state_, dy);
}

LayerConfig LeakyReLU::config() const { return {{"alpha", config_value(alpha_)}}; }

LayerConfig GELU::config() const { return {{"approximate", config_value(approximate())}}; }

}  // namespace ember
