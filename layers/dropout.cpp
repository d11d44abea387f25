// Dropout layer.
#include "dropout.h"

#include <cmath>

#include "../core/error.h"
#include "layer_config.h"
#include "ops/dropout.h"

namespace ember {

Dropout::Dropout(float rate) : rate_(rate) {
  EMBER_CHECK(std::isfinite(rate) && rate >= 0.0f && rate < 1.0f, ArgumentError,
              "Dropout: rate must be in [0, 1), got " + std::to_string(rate));
  params_rng_.threshold = static_cast<uint32_t>(std::ceil(static_cast<double>(rate) * detail::kCounterBase));
  params_rng_.scale = 1.0f / (1.0f - rate);
}

std::vector<StateSpec> Dropout::state_specs() const {
  // The step counter [lo, hi] (layers/random_bits.h); advanced alike by every replica.
  return {StateSpec{.name = "step", .shape = Shape{2}, .init = 0.0f, .averaged = false}};
}

const Tensor& Dropout::do_forward(const Tensor& x, bool training) {
  EMBER_CHECK(state_tensors_.size() == 1, Error, "Dropout: bind_state() first (Model::build does)");
  masked_ = training && rate_ > 0.0f;
  if (!masked_) return x;
  return detail::dropout_forward(state_, params_rng_, state_tensors_.at(0), x);
}

const Tensor& Dropout::do_backward(const Tensor& dy) {
  if (!needs_input_grad()) return no_input_grad();
  if (!masked_) return dy;  // the forward passed its input through
  return detail::dropout_backward(state_, params_rng_.scale, dy);
}

std::string Dropout::kernel_info(int64_t, Device device) const {
  return device.is_cuda() ? "ember CUDA kernel (counter-based mask)" : "ember cpu loop (counter-based mask)";
}

LayerConfig Dropout::config() const { return {{"rate", config_value(rate_)}}; }

}  // namespace ember
