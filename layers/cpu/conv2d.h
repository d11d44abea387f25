// Conv2D on the CPU: oneDNN convolution primitives (forward, backward-data, backward-weights),
// created once per shape and cached per thread. Bias and the optional ReLU are fused as
// post-ops in the forward pass.
//
// Layouts: x, y, dx, dy are NHWC (the layout oneDNN's direct kernels run fastest in; where a
// Winograd forward or a blocked weight gradient is faster, conv2d.cpp reorders around it);
// w is (K, C, R, S) row-major, b is (K). Outputs are written (=), never accumulated.
#pragma once

#include <string>

#include "../../core/tensor.h"
#include "../geometry.h"

namespace ember::cpu {

void conv2d_forward(const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);

// y is the forward output (needed to undo the fused ReLU); dx may be null when the input
// gradient is not needed (the first layer of a model). With `dy_premasked` the caller has
// already applied the ReLU's mask to dy (fused into the next layer's backward). dw and db
// undefined: a frozen layer, neither computed.
void conv2d_backward(const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy,
                     Tensor* dx, Tensor& dw, Tensor& db, bool dy_premasked = false);

// The kernel of each pass for this shape: "oneDNN <implementation>" or Ember's own, e.g.
// "fwd oneDNN jit:avx2, bwd-data oneDNN ..., bwd-weights ember winograd F(4x4,3x3), workspace ...".
std::string conv2d_kernel_info(const Conv2dShape& g);

}  // namespace ember::cpu
