// Dense's one dispatch: the backend from the input's device (oneDNN sgemm or cuBLAS), the
// tensors its backward needs and its scratch kept in `state`, which the layer only holds.
// Activations are row-major (N, features) on every backend. Private to the library.
#pragma once

#include <memory>

#include "../../core/tensor.h"
#include "../layer.h"

namespace ember::detail {

// y = act(x w^T + b); valid until the next forward on `state`.
const Tensor& dense_forward(std::unique_ptr<OpState>& state, const Tensor& x, const Tensor& w, const Tensor& b,
                            bool relu);
// After dense_forward on the same state: writes dw and db (undefined: a frozen layer, none computed),
// returns dx, or null when !want_dx.
// `mask_relu`: apply the fused ReLU's mask to dy (false when relu is off, or when the caller
// already applied it). dy is only read.
const Tensor* dense_backward(std::unique_ptr<OpState>& state, const Tensor& w, const Tensor& dy, bool mask_relu,
                             bool want_dx, Tensor& dw, Tensor& db);

}  // namespace ember::detail
