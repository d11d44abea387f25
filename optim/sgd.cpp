// SGD with momentum.
#include "sgd.h"

#include "../core/dispatch.h"
#include "../core/error.h"
#include "cpu/sgd.h"
#include "cuda_ops.h"

namespace ember {

SGD::SGD(SGDOptions options) : opt_(options), reg_{options.weight_decay, options.global_clipnorm, options.clipvalue} {
  reg_.validate("SGD");
  EMBER_CHECK(options.learning_rate > 0, ArgumentError, "SGD: learning rate must be > 0");
  EMBER_CHECK(options.momentum >= 0 && options.momentum < 1, ArgumentError, "SGD: momentum must be in [0, 1)");
}

void SGD::step(Tensor& params, const Tensor& grads) {
  prepare(params, grads, {&velocity_});
  regularize(params, grads, opt_.learning_rate, reg_);
  ++iterations_;
  if (detail::on_gpu(params)) {
    for_each_span(params.numel(), [&](int64_t o, int64_t c) {
      detail::optim_cuda_ops().sgd_update(
          params.device().index, static_cast<float*>(params.raw()) + o, static_cast<const float*>(grads.raw()) + o,
          static_cast<float*>(velocity_.raw()) + o, c, device_rate(params), opt_.momentum, opt_.nesterov);
    });
    return;
  }
  for_each_span(params.numel(), [&](int64_t o, int64_t c) {
    cpu::sgd_update(params.f32() + o, grads.f32() + o, velocity_.f32() + o, c, opt_.learning_rate, opt_.momentum,
                    opt_.nesterov);
  });
}

std::vector<std::pair<std::string, double>> SGD::hyperparameters() const {
  return {{"learning_rate", opt_.learning_rate},     {"momentum", opt_.momentum},
          {"nesterov", opt_.nesterov ? 1 : 0},       {"weight_decay", reg_.weight_decay},
          {"global_clipnorm", reg_.global_clipnorm}, {"clipvalue", reg_.clipvalue}};
}

void SGD::set_state(const std::string& name, const Tensor& values) {
  if (name != "velocity") throw ArgumentError("SGD has no state '" + name + "' (it has velocity)");
  restore(velocity_, values);
}

}  // namespace ember
