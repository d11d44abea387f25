// RMSprop (see rmsprop.h).
#include "rmsprop.h"

#include "../core/dispatch.h"
#include "../core/error.h"
#include "cpu/rmsprop.h"
#include "cuda_ops.h"

namespace ember {

RMSprop::RMSprop(RmspropOptions options)
    : opt_(options), reg_{options.weight_decay, options.global_clipnorm, options.clipvalue} {
  EMBER_CHECK(options.learning_rate > 0, ArgumentError, "RMSprop: learning rate must be > 0");
  EMBER_CHECK(options.rho >= 0 && options.rho < 1, ArgumentError, "RMSprop: rho must be in [0, 1)");
  EMBER_CHECK(options.epsilon > 0, ArgumentError, "RMSprop: epsilon must be > 0");
  reg_.validate("RMSprop");
}

void RMSprop::step(Tensor& params, const Tensor& grads) {
  prepare(params, grads, {&v_});
  regularize(params, grads, opt_.learning_rate, reg_);
  ++iterations_;
  if (detail::on_gpu(params)) {
    for_each_span(params.numel(), [&](int64_t o, int64_t c) {
      detail::optim_cuda_ops().rmsprop_update(
          params.device().index, static_cast<float*>(params.raw()) + o, static_cast<const float*>(grads.raw()) + o,
          static_cast<float*>(v_.raw()) + o, c, device_rate(params), opt_.rho, opt_.epsilon);
    });
    return;
  }
  for_each_span(params.numel(), [&](int64_t o, int64_t c) {
    cpu::rmsprop_update(params.f32() + o, grads.f32() + o, v_.f32() + o, c, opt_.learning_rate, opt_.rho, opt_.epsilon);
  });
}

void RMSprop::set_state(const std::string& name, const Tensor& values) {
  if (name != "v") throw ArgumentError("RMSprop has no state '" + name + "' (it has v)");
  restore(v_, values);
}

std::vector<std::pair<std::string, double>> RMSprop::hyperparameters() const {
  return {{"learning_rate", opt_.learning_rate},
          {"rho", opt_.rho},
          {"epsilon", opt_.epsilon},
          {"weight_decay", reg_.weight_decay},
          {"global_clipnorm", reg_.global_clipnorm},
          {"clipvalue", reg_.clipvalue}};
}

}  // namespace ember
