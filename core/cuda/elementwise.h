// Small element-wise kernels on a device's stream: the GPU side of Tensor::fill and of the
// gradient weighting of data-parallel steps (distribute/data_parallel.cpp).
#pragma once

#include <cstdint>

#include "context.h"

namespace ember::cuda {

void fill(Context& ctx, float* p, int64_t n, float value);
void scale(Context& ctx, float* p, int64_t n, float factor);  // p *= factor

}  // namespace ember::cuda
