// MaxPool2D's one dispatch: the backend from the input's device, the layout it runs in (NHWC on
// the CPU, the input's on a GPU), and what its backward needs (the CPU's argmax indices, the
// GPU's x) kept in `state`, which the layer only holds. Private to the library.
#pragma once

#include <memory>

#include "../../core/tensor.h"
#include "../geometry.h"
#include "../layer.h"

namespace ember::detail {

// y = max over each window, in the backend's layout; valid until the next forward on `state`.
const Tensor& maxpool2d_forward(std::unique_ptr<OpState>& state, const Pool2dShape& g, const Tensor& x);
// After maxpool2d_forward on the same state: dx (the input's shape, the backend's layout).
// With `relu_input` the forward's input was a ReLU output and the ReLU's backward is fused in.
const Tensor& maxpool2d_backward(std::unique_ptr<OpState>& state, const Pool2dShape& g, const Tensor& dy,
                                 bool relu_input);
// The GPU's or the CPU's kernel, in words.
const char* maxpool2d_kernel_info(Device device);

}  // namespace ember::detail
