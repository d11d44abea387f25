// LayerNormalization's dispatch: over the last axis of row-major input on either backend; the
// input and the per-row statistics kept in `state` for the backward. Private to the library.
#pragma once

#include <memory>

#include "../../core/tensor.h"
#include "../layer.h"

namespace ember::detail {

// y = (x - mean) / sqrt(var + eps) * gamma + beta over the last axis.
const Tensor& layernorm_forward(std::unique_ptr<OpState>& state, const Tensor& gamma, const Tensor& beta, float eps,
                                const Tensor& x);
// After a forward: dgamma and dbeta written (=); dx returned when want_dx (else nullptr).
const Tensor* layernorm_backward(std::unique_ptr<OpState>& state, const Tensor& gamma, const Tensor& dy, bool want_dx,
                                 Tensor& dgamma, Tensor& dbeta);

}  // namespace ember::detail
