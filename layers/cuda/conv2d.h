// Conv2D on the GPU with cuDNN: the contract of layers/cpu/conv2d.h, with activations NCHW
// (row-major: the public layout, with the parameters' KCRS filters) or NHWC (set_gpu_nhwc, with
// a KRSC copy of the filters made each call and dw transposed back). Asymmetric SAME padding
// (even kernels, strides) runs as a VALID convolution of an explicitly padded input
// (layers/cuda/pad.h); bias and the fused ReLU run as a cuDNN add and a ReLU kernel. Algorithms
// are chosen once per shape (cuDNN's heuristics; deterministic backward ones under
// set_gpu_deterministic; TF32 math only under set_allow_tf32, core/runtime.h) and cached per
// shape and setting; one that fails when it runs gives way to the next cuDNN listed. `slot` (the
// op state's) finds the plan again without a lock; workspaces come from the device's shared
// buffer (Context::workspace).
#pragma once

#include <string>

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"
#include "../cuda_ops.h"
#include "../geometry.h"

namespace ember::cuda {

// With bf16 (the mixed_bf16 policy): x, w and the (masked) output gradient rounded to bf16
// (to_bf16, bf16.h) for cuDNN's bf16 convolutions (fp32 accumulation, tensor-core math), whose
// results cuDNN writes in bf16: y before its fp32 bias and ReLU, dx and dw are bf16 values
// (one more rounding than the CPU's bf16 path, whose results are fp32); db in fp32. Beside NHWC
// activations the bf16 filters are KRSC too (transposed as they are rounded; dw transposed back).
void conv2d_forward(Context& ctx, const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y,
                    ::ember::detail::GpuPlanSlot& slot, bool bf16 = false);
void conv2d_backward(Context& ctx, const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& y,
                     const Tensor& dy, Tensor* dx, Tensor& dw, Tensor& db, bool dy_premasked,
                     ::ember::detail::GpuPlanSlot& slot, bool bf16 = false);
// "cuDNN fwd algo 1, bwd-data algo 1, bwd-filter algo 0, workspace N bytes" (of the bf16 plan
// with bf16)
std::string conv2d_kernel_info(Context& ctx, const Conv2dShape& g, bool bf16 = false);

}  // namespace ember::cuda
