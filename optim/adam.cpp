// Adam: the bias correction is folded into the step size in double precision once per step;
// the per-element loop is fused (one pass over p, g, m, v) and split across the pool.
#include "adam.h"

#include <cmath>

#include "../core/dispatch.h"
#include "../core/error.h"
#include "cpu/adam.h"
#include "cuda_ops.h"

namespace ember {

Adam::Adam(AdamOptions options) : opt_(options) {
  EMBER_CHECK(options.learning_rate > 0, ArgumentError, "Adam: learning rate must be > 0");
  EMBER_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1, ArgumentError,
              "Adam: beta1 and beta2 must be in [0, 1)");
  EMBER_CHECK(options.epsilon > 0, ArgumentError, "Adam: epsilon must be > 0");
}

void Adam::step(Tensor& params, const Tensor& grads) {
  prepare(params, grads, {&m_, &v_});
  ++iterations_;
  const double t = static_cast<double>(iterations_);
  const double lr_t = opt_.learning_rate * std::sqrt(1.0 - std::pow(static_cast<double>(opt_.beta2), t)) /
                      (1.0 - std::pow(static_cast<double>(opt_.beta1), t));
  if (detail::on_gpu(params)) {
    detail::optim_cuda_ops().adam_update(params.device().index, static_cast<float*>(params.raw()),
                                         static_cast<const float*>(grads.raw()), static_cast<float*>(m_.raw()),
                                         static_cast<float*>(v_.raw()), params.numel(), static_cast<float>(lr_t),
                                         opt_.beta1, opt_.beta2, opt_.epsilon);
    return;
  }
  cpu::adam_update(params.f32(), grads.f32(), m_.f32(), v_.f32(), params.numel(), static_cast<float>(lr_t), opt_.beta1,
                   opt_.beta2, opt_.epsilon);
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
