// Dense's one dispatch: the backend from the input's device (oneDNN sgemm or cuBLAS), the
// tensors its backward needs and its scratch kept in `state`, which the layer only holds.
// Activations are row-major (N, features) on every backend. Private to the library.
#pragma once

#include <memory>
#include <string>

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

// The product dense_forward runs for a (batch, in) input and `units` outputs on `device` under the
// precision in effect (fp32, or the mixed_bf16 policy's bf16 products), e.g. "oneDNN sgemm".
std::string dense_kernel_info(Device device, int64_t batch, int64_t in, int64_t units);

}  // namespace ember::detail
