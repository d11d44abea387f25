// The augmentation layers' map on the GPU: layers/cpu/augment.h's contract on the device's stream,
// the same draw and indices (layers/augment_math.h). The step counter stays on the device (read
// there, advanced there), so a captured CUDA graph replays each step with its own draw.
#pragma once

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"
#include "../augment_math.h"

namespace ember::cuda {

// y (N, C, out_h, out_w) = the map of x (N, C, h, w), row-major f32 on the device. counter: f32
// [lo, hi] on the device, the step's key (null: spec.random is false); `drawn` (2 f32 on the device,
// with a counter) receives the value drawn from, for the backward; with `advance` the kernel's last
// block advances the counter.
void augment_forward(Context& ctx, const ::ember::detail::AugmentSpec& s, Tensor* counter, Tensor* drawn,
                     const Tensor& x, Tensor& y, int64_t n, int64_t c, bool advance);
// dx (N, C, h, w) = zero, then dy (N, C, out_h, out_w) moved back to the pixels it came from, under
// the draw of `drawn` (the forward's; null: no draw).
void augment_backward(Context& ctx, const ::ember::detail::AugmentSpec& s, const Tensor* drawn, const Tensor& dy,
                      Tensor& dx, int64_t n, int64_t c);

}  // namespace ember::cuda
