// Dropout on the GPU: the contract of layers/cpu/dropout.h, on the device's stream, with the
// same mask bit for bit (layers/random_bits.h, element i hashed by its row-major NCHW index in
// either layout). The step counter stays on the device: the forward reads it there and
// dropout_advance moves it there, so a captured CUDA graph replays each step with the counter's
// value at replay time and the host never waits.
#pragma once

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"
#include "../random_bits.h"

namespace ember::cuda {

// counter: f32 (2,) [lo, hi] on the device (read, not advanced); x, y (f32), mask (u8): one
// shape and layout (row-major, or NHWC 4-D). In place (y == x) allowed.
void dropout_forward(Context& ctx, const ::ember::detail::DropoutParams& p, const Tensor& counter, const Tensor& x,
                     Tensor& y, Tensor& mask);
// The same, then, with `advance` (fused_advance()), the counter plus one as dropout_advance does
// it, by the forward kernel's last block (by dropout_advance itself when x is empty): one launch
// instead of two, the same bits.
void dropout_forward(Context& ctx, const ::ember::detail::DropoutParams& p, Tensor& counter, const Tensor& x, Tensor& y,
                     Tensor& mask, bool advance);
// The step counter plus one (one thread on the stream).
void dropout_advance(Context& ctx, Tensor& counter);
// dx = dy * mask * scale; in place (dx == dy) allowed.
void dropout_backward(Context& ctx, float scale, const Tensor& mask, const Tensor& dy, Tensor& dx);

}  // namespace ember::cuda
