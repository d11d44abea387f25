// Explicit 2-D padding and cropping on the GPU, for the windows cuDNN cannot express: it pads
// symmetrically, while SAME padding with an even window or a stride pads one more row/column
// at the bottom/right. The GPU Conv2D and MaxPool2D then pad the input explicitly, run a VALID
// cuDNN op on it, and crop the input gradient back (layers/cuda/conv2d.cpp, maxpool2d.cpp).
#pragma once

#include <cstdint>

#include "../../core/cuda/context.h"

namespace ember::cuda {

// For each of `planes` planes: dst (dh, dw)[i][j] = src (sh, sw)[i - top][j - left], and `fill`
// where that falls outside src. A negative top/left crops.
void shift2d(Context& ctx, const float* src, int64_t planes, int64_t sh, int64_t sw, float* dst, int64_t dh, int64_t dw,
             int64_t top, int64_t left, float fill);

}  // namespace ember::cuda
