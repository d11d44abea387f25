// Shared optimizer checks.
#include "optimizer.h"

#include <atomic>

#include "../core/error.h"

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

}  // namespace ember
