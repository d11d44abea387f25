// Average pooling on the CPU over NHWC tensors, Keras' semantics: a window's average counts only
// the input positions inside it (padding is not counted).
#pragma once

#include "../../core/tensor.h"
#include "../geometry.h"

namespace ember::cpu {

// x NHWC (N,C,H,W), y NHWC (N,C,P,Q), written (=).
void avgpool2d_forward(const Pool2dShape& g, const Tensor& x, Tensor& y);
// dx NHWC (N,C,H,W) = each output's gradient spread evenly over its window's inputs.
void avgpool2d_backward(const Pool2dShape& g, const Tensor& dy, Tensor& dx);

}  // namespace ember::cpu
