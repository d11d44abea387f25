// Dropout's dispatch: the mask drawn at step `counter` (the layer's state, on the model's
// device) by either backend with the same bits; the counter advanced after the draw (on a GPU by
// a kernel, so a captured step draws anew on each replay). The mask kept in `state`. Private.
#pragma once

#include <memory>

#include "../../core/tensor.h"
#include "../layer.h"
#include "../random_bits.h"

namespace ember::detail {

// Training forward: y = x * mask * scale in x's layout; advances `counter`.
const Tensor& dropout_forward(std::unique_ptr<OpState>& state, const DropoutParams& p, Tensor& counter,
                              const Tensor& x);
// dx = dy * mask * scale, in the forward's layout (dy in any layout).
const Tensor& dropout_backward(std::unique_ptr<OpState>& state, float scale, const Tensor& dy);

}  // namespace ember::detail
