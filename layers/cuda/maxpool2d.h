// MaxPool2D on the GPU (our own kernels, layers/cuda/maxpool2d.cu): the contract of
// layers/cpu/maxpool2d.h for any padding (asymmetric SAME included), x, y, dy and dx all NCHW
// (row-major) or all NHWC. The backward can fuse the ReLU of the layer before (relu_input: mask
// where the input was <= 0), as the CPU path does. Both give the CPU twin's bits.
#pragma once

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"
#include "../cuda_ops.h"
#include "../geometry.h"

namespace ember::cuda {

// The CPU twin's signature (layers/cpu/maxpool2d.h). The backward finds the maxima again from x,
// so `indices` is not read or written and may be null; `slot` is not used (no plan to keep).
void maxpool2d_forward(Context& ctx, const Pool2dShape& g, const Tensor& x, Tensor& y, Tensor* indices,
                       ::ember::detail::GpuPlanSlot& slot);
void maxpool2d_backward(Context& ctx, const Pool2dShape& g, const Tensor& x, const Tensor& y, const Tensor& dy,
                        const Tensor* indices, Tensor& dx, bool relu_input, ::ember::detail::GpuPlanSlot& slot);

}  // namespace ember::cuda
