// Adam: the bias correction is folded into the step size in double precision once per step;
// the per-element loop is fused (one pass over p, g, m, v) and split across the pool.
#include "adam.h"

#include <cmath>

#include "../core/dispatch.h"
#include "../core/error.h"
#include "../core/runtime.h"
#include "cpu/adam.h"
#include "cuda_ops.h"

namespace ember {

Adam::Adam(AdamOptions options, const std::string& who)
    : opt_(options), reg_{options.weight_decay, options.global_clipnorm, options.clipvalue} {
  reg_.validate(who);
  EMBER_CHECK(options.learning_rate > 0, ArgumentError, who + ": learning rate must be > 0");
  EMBER_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1, ArgumentError,
              who + ": beta1 and beta2 must be in [0, 1)");
  EMBER_CHECK(options.epsilon > 0, ArgumentError, who + ": epsilon must be > 0");
}

AdamW::AdamW(AdamWOptions o)
    : Adam(AdamOptions{o.learning_rate, o.beta1, o.beta2, o.epsilon, o.weight_decay, o.global_clipnorm, o.clipvalue},
           "AdamW") {}

std::vector<std::pair<std::string, double>> Adam::hyperparameters() const {
  return {{"learning_rate", opt_.learning_rate},
          {"beta1", opt_.beta1},
          {"beta2", opt_.beta2},
          {"epsilon", opt_.epsilon},
          {"weight_decay", reg_.weight_decay},
          {"global_clipnorm", reg_.global_clipnorm},
          {"clipvalue", reg_.clipvalue}};
}

void Adam::step(Tensor& params, const Tensor& grads) {
  prepare(params, grads, {&m_, &v_});
  regularize(params, grads, opt_.learning_rate, reg_);
  if (detail::on_gpu(params)) {
    // t, the learning rate and the step size live on the device and advance there (a replayed
    // graph of the step sees the next values; fit rewrites the rate before a replay when a
    // schedule changed it); the host count follows. Uploaded only when they differ: the first
    // step, after a restored count, on another device.
    if (!device_scalars_.defined() || device_scalars_.device() != params.device()) {
      device_scalars_ = Tensor::empty(Shape{2}, DType::F64, params.device());
      device_t_ = -1;
    }
    if (device_t_ != iterations_) {
      Tensor host = Tensor::empty(Shape{2}, DType::F64, Device::cpu());
      host.data<double>()[0] = static_cast<double>(iterations_);
      host.data<double>()[1] = 0.0;
      device_scalars_.copy_from(host);
      device_t_ = iterations_;
    }
    const auto& ops = detail::optim_cuda_ops();
    const int d = params.device().index;
    auto* scalars = static_cast<double*>(device_scalars_.raw());
    auto* p = static_cast<float*>(params.raw());
    const auto* g = static_cast<const float*>(grads.raw());
    auto* m = static_cast<float*>(m_.raw());
    auto* v = static_cast<float*>(v_.raw());
    if (fused_advance() && !update_spans()) {  // one launch: the last block advances {t, lr_t} (the same bits)
      ops.adam_update_advance(d, p, g, m, v, params.numel(), scalars, device_rate(params), opt_.beta1, opt_.beta2,
                              opt_.epsilon);
    } else {
      ops.adam_advance(d, scalars, device_rate(params), opt_.beta1, opt_.beta2);
      for_each_span(params.numel(), [&](int64_t o, int64_t c) {
        ops.adam_update(d, p + o, g + o, m + o, v + o, c, scalars, opt_.beta1, opt_.beta2, opt_.epsilon);
      });
    }
    device_t_ = ++iterations_;
    return;
  }
  ++iterations_;
  const double t = static_cast<double>(iterations_);
  const double lr_t = opt_.learning_rate * std::sqrt(1.0 - std::pow(static_cast<double>(opt_.beta2), t)) /
                      (1.0 - std::pow(static_cast<double>(opt_.beta1), t));
  for_each_span(params.numel(), [&](int64_t o, int64_t c) {
    cpu::adam_update(params.f32() + o, grads.f32() + o, m_.f32() + o, v_.f32() + o, c, static_cast<float>(lr_t),
                     opt_.beta1, opt_.beta2, opt_.epsilon);
  });
}

void Adam::count_step() {
  ++iterations_;
  if (device_t_ >= 0) ++device_t_;  // the replayed advance moved the device's count too
}

void Adam::set_state(const std::string& name, const Tensor& values) {
  if (name == "m")
    restore(m_, values);
  else if (name == "v")
    restore(v_, values);
  else
    throw ArgumentError("Adam has no state '" + name + "' (it has m and v)");
}

}  // namespace ember
