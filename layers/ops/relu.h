// ReLU's one dispatch: elementwise on any backend, in the input's own layout; the output (which
// the backward reads) and the input gradient kept in `state`. Private to the library.
#pragma once

#include <memory>

#include "../../core/tensor.h"
#include "../layer.h"

namespace ember::detail {

// y = max(x, 0), x's shape and layout; valid until the next forward on `state`.
const Tensor& relu_forward(std::unique_ptr<OpState>& state, const Tensor& x);
// After relu_forward on the same state: dx = dy * (y > 0), in y's layout (dy in any layout).
const Tensor& relu_backward(std::unique_ptr<OpState>& state, const Tensor& dy);

}  // namespace ember::detail
