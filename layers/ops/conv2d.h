// Conv2D's one dispatch. It picks the backend from the input's device, converts the input to
// the layout that backend runs in (oneDNN NHWC on the CPU, cuDNN NCHW on a GPU) and keeps that
// copy, the output and its scratch in `state`, which the layer only holds. Private to the library.
#pragma once

#include <memory>
#include <string>

#include "../../core/tensor.h"
#include "../geometry.h"
#include "../layer.h"

namespace ember::detail {

// y = act(conv(x, w) + b) in the backend's layout; valid until the next forward on `state`.
const Tensor& conv2d_forward(std::unique_ptr<OpState>& state, const Conv2dShape& g, const Tensor& x, const Tensor& w,
                             const Tensor& b);
// After conv2d_forward on the same state: writes dw and db (undefined: a frozen layer, none computed),
// returns dx (the input's shape, the
// backend's layout), or null when !want_dx. With `dy_premasked` the caller applied the fused
// ReLU's mask to dy already.
const Tensor* conv2d_backward(std::unique_ptr<OpState>& state, const Conv2dShape& g, const Tensor& w, const Tensor& dy,
                              bool want_dx, Tensor& dw, Tensor& db, bool dy_premasked);
// The implementations the backend of `device` picks for this geometry.
std::string conv2d_kernel_info(const Conv2dShape& g, Device device);
// Whether a CPU convolution of this shape runs in bf16 now: the precision is mixed_bf16, the CPU
// has AMX-BF16 (on AVX512-BF16 alone oneDNN 2.6's bf16 convolutions measured about twice the
// time of Ember's fp32 ones: docs/benchmarks.md; said once), and C*R*S > 27 (fewer multiply-adds
// per output are bound by memory: bf16 gives them nothing).
bool conv2d_runs_bf16(const Conv2dShape& g);
// The same for the GPU cuda:device: its precision is mixed_bf16 (gpu_precision) and C*R*S > 27.
bool conv2d_runs_bf16_on_gpu(const Conv2dShape& g, int device);

}  // namespace ember::detail
