// Shared optimizer checks.
#include "optim/optimizer.h"

#include "core/error.h"

namespace ember {

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

}  // namespace ember
