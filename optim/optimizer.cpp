// Shared optimizer checks.
#include "optimizer.h"

#include <atomic>
#include <cmath>
#include <limits>

#include "../core/cuda_graph.h"
#include "../core/dispatch.h"
#include "../core/error.h"
#include "cpu/regularize.h"
#include "cuda_ops.h"

namespace ember {

uint64_t Optimizer::next_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

void Optimizer::prepare(const Tensor& params, const Tensor& grads, std::vector<Tensor*> state) {
  EMBER_CHECK(params.dtype() == DType::F32 && grads.dtype() == DType::F32 && params.numel() == grads.numel() &&
                  params.device() == grads.device(),
              ShapeError, name() + ": parameters " + params.str() + " and gradients " + grads.str() + " do not match");
  for (Tensor* s : state) {
    if (!s->defined() || s->numel() != params.numel() || s->device() != params.device()) {
      // Made inside a CUDA graph capture, the zeroing would be part of the graph: every replay
      // would reset the state (Adam's moments) to zero, silently.
      EMBER_CHECK(!params.device().is_cuda() || !CudaGraph::capturing(params.device()), Error,
                  name() +
                      ": its state is made by its first step, which cannot be inside a CUDA graph capture "
                      "(each replay would zero it again): take one step before capturing");
      *s = Tensor::zeros(Shape{params.numel()}, DType::F32, params.device());
    }
  }
}

void Optimizer::restore(Tensor& slot, const Tensor& values) {
  ++state_version_;
  EMBER_CHECK(values.dtype() == DType::F32, ShapeError, "optimizer state must be f32, got " + values.str());
  slot = Tensor::empty(Shape{values.numel()}, DType::F32, values.device());
  slot.copy_from(values.reshape(Shape{values.numel()}));
}

void Regularization::validate(const std::string& who) const {
  for (const auto& [name, v] : {std::pair{"weight_decay", weight_decay}, std::pair{"global_clipnorm", global_clipnorm},
                                std::pair{"clipvalue", clipvalue}})
    EMBER_CHECK(std::isfinite(v) && v >= 0, ArgumentError,
                who + ": " + name + " must be >= 0 (0: off), got " + std::to_string(v));
}

void Optimizer::set_decay_mask(Tensor mask) {
  EMBER_CHECK(!mask.defined() || (mask.dtype() == DType::F32 && mask.rank() == 1), ShapeError,
              name() + ": the decay mask must be f32 (parameters,), got " + mask.str());
  decay_mask_ = std::move(mask);
  ++state_version_;  // a captured step reads the mask's address
}

const float* Optimizer::device_rate(const Tensor& params) {
  const bool fresh = !device_rate_.defined() || device_rate_.device() != params.device();
  // A write queued inside a capture would be replayed by every launch, resetting the rate a
  // schedule set before it: refused (fit runs eager steps first and syncs before capturing).
  EMBER_CHECK(!CudaGraph::capturing(params.device()) || (!fresh && device_rate_value_ == learning_rate()), Error,
              name() +
                  ": the learning rate would be written inside a CUDA graph capture (every replay would "
                  "reset it): run an eager step first and call sync_device_rate() before capturing");
  if (fresh) {
    device_rate_ = Tensor::empty(Shape{1}, DType::F32, params.device());
    device_rate_value_ = learning_rate();
    detail::optim_cuda_ops().set_rate(params.device().index, static_cast<float*>(device_rate_.raw()),
                                      device_rate_value_);
  } else {
    sync_device_rate();
  }
  return static_cast<float*>(device_rate_.raw());
}

void Optimizer::sync_device_rate() {
  if (!device_rate_.defined() || device_rate_value_ == learning_rate()) return;
  device_rate_value_ = learning_rate();
  detail::optim_cuda_ops().set_rate(device_rate_.device().index, static_cast<float*>(device_rate_.raw()),
                                    device_rate_value_);
}

void Optimizer::regularize(Tensor& params, const Tensor& grads, float learning_rate, const Regularization& r) {
  if (!r.active()) return;
  const int64_t n = params.numel();
  const bool mask = decay_mask_.defined();
  if (r.weight_decay > 0 && mask)
    EMBER_CHECK(decay_mask_.numel() == n && decay_mask_.device() == params.device(), ShapeError,
                name() + ": the decay mask " + decay_mask_.str() + " does not fit the parameters " + params.str());
  auto* g = static_cast<float*>(grads.raw());  // clipped in place: the step's own gradient buffer
  auto* p = static_cast<float*>(params.raw());
  const float factor = learning_rate * r.weight_decay;  // on a GPU formed there from device_rate()
  const float* m = mask ? static_cast<const float*>(decay_mask_.raw()) : nullptr;
  if (detail::on_gpu(params)) {
    const auto& ops = detail::optim_cuda_ops();
    const int d = params.device().index;
    if (r.clipvalue > 0) ops.clip_by_value(d, g, n, r.clipvalue);
    if (r.global_clipnorm > 0) {
      if (!norm_scratch_.defined() || norm_scratch_.device() != params.device())
        norm_scratch_ = Tensor::empty(Shape{ops.norm_scratch_doubles}, DType::F64, params.device());
      ops.clip_by_global_norm(d, g, n, r.global_clipnorm, static_cast<double*>(norm_scratch_.raw()));
    }
    if (r.weight_decay > 0)
      for_each_span(n, [&](int64_t o, int64_t c) {
        ops.decay(d, p + o, m ? m + o : nullptr, c, device_rate(params), r.weight_decay);
      });
    return;
  }
  if (r.clipvalue > 0) cpu::clip_by_value(g, n, r.clipvalue);
  if (r.global_clipnorm > 0) {
    const double norm = cpu::global_norm(g, n);
    // TF's clip_by_global_norm: c / max(norm, c); a non-finite norm makes every gradient NaN (a
    // diverged step shows as one, never as a silently zeroed update).
    if (!std::isfinite(norm))
      cpu::scale(g, n, std::numeric_limits<float>::quiet_NaN());
    else if (norm > r.global_clipnorm)
      cpu::scale(g, n, static_cast<float>(r.global_clipnorm / norm));
  }
  if (r.weight_decay > 0)
    for_each_span(n, [&](int64_t o, int64_t c) { cpu::decay(p + o, m ? m + o : nullptr, c, factor); });
}

}  // namespace ember
