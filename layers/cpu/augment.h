// The augmentation layers' map on the CPU (layers/augment_math.h), sample by sample.
#pragma once

#include <cstdint>

#include "../../core/tensor.h"
#include "../augment_math.h"

namespace ember::cpu {

// The step's key from a counter value (f32 [lo, hi] on the CPU).
uint64_t augment_key(const detail::AugmentSpec& s, const Tensor& counter);
// Forward: y (N, C, out_h, out_w) = the map of x (N, C, h, w), row-major. Backward (`backward`):
// x is dy (N, C, out_h, out_w) and y the input gradient (N, C, h, w): zero, then each output
// pixel's gradient moved back to the pixel it read (scaled with rescale).
void augment(const detail::AugmentSpec& s, uint64_t key, const float* x, float* y, int64_t n, int64_t c, bool backward);

}  // namespace ember::cpu
