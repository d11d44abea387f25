// Dropout on the CPU (training only; the layer passes x through in inference). The mask comes
// from layers/random_bits.h: the same bits as the GPU twin's for the same seed and step.
#pragma once

#include "../../core/tensor.h"
#include "../random_bits.h"

namespace ember::cpu {

// y = x * scale where element i (its row-major NCHW index) is kept at step `counter`
// (f32 (2,), [lo, hi], read, not advanced), else 0; mask (u8, x's shape and layout) = 1 where
// kept. x, y, mask: one shape and layout (row-major, or NHWC 4-D).
void dropout_forward(const detail::DropoutParams& p, const Tensor& counter, const Tensor& x, Tensor& y, Tensor& mask);
// The step counter plus one.
void dropout_advance(Tensor& counter);
// dx = dy * mask * scale (dy, mask, dx: one shape and layout).
void dropout_backward(float scale, const Tensor& mask, const Tensor& dy, Tensor& dx);

}  // namespace ember::cpu
