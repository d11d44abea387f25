// MaxPool2D on the GPU with cuDNN, NCHW (row-major) activations; asymmetric SAME padding runs
// as a VALID pooling of an input padded with -inf (layers/cuda/pad.h). The
// backward can fuse the ReLU of the layer before (relu_input: mask where the input was <= 0),
// as the CPU path does.
#pragma once

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"
#include "../cuda_ops.h"
#include "../geometry.h"

namespace ember::cuda {

// The CPU twin's signature (layers/cpu/maxpool2d.h); cuDNN finds the maxima again from x and y,
// so `indices` is not read or written and may be null. `slot` (the op state's) keeps the plan.
void maxpool2d_forward(Context& ctx, const Pool2dShape& g, const Tensor& x, Tensor& y, Tensor* indices,
                       ::ember::detail::GpuPlanSlot& slot);
void maxpool2d_backward(Context& ctx, const Pool2dShape& g, const Tensor& x, const Tensor& y, const Tensor& dy,
                        const Tensor* indices, Tensor& dx, bool relu_input, ::ember::detail::GpuPlanSlot& slot);

}  // namespace ember::cuda
