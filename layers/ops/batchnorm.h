// BatchNormalization's dispatch: per channel of 4-D input (NHWC on the CPU; the input's own
// layout, NCHW or NHWC, on a GPU) or per feature of (N, F); the batch statistics and the input
// kept in `state` for the backward. Private to the library.
#pragma once

#include <memory>

#include "../../core/tensor.h"
#include "../layer.h"

namespace ember::detail {

struct BatchNormArgs {
  const Tensor* gamma;
  const Tensor* beta;
  Tensor* running_mean;
  Tensor* running_var;
  float factor;  // 1 - momentum
  float eps;
};

// Training (batch statistics, running statistics updated) or inference (running statistics).
const Tensor& batchnorm_forward(std::unique_ptr<OpState>& state, const BatchNormArgs& a, const Tensor& x,
                                bool training);
// After a training forward: dx (the forward's layout) and dgamma, dbeta written (=). After an
// inference forward, with dgamma and dbeta undefined (a frozen layer): dx alone.
const Tensor& batchnorm_backward(std::unique_ptr<OpState>& state, const BatchNormArgs& a, const Tensor& dy,
                                 Tensor& dgamma, Tensor& dbeta);

}  // namespace ember::detail
