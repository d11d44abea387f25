// Small element-wise kernels on a device's stream: the GPU side of Tensor::fill and of the
// gradient weighting of data-parallel steps (distribute/data_parallel.cpp).
#pragma once

#include <cstdint>

#include "context.h"

namespace ember::cuda {

void fill(Context& ctx, float* p, int64_t n, float value);
void fill(Context& ctx, double* p, int64_t n, double value);  // the f64 sums buffers (MetricSums)
void scale(Context& ctx, float* p, int64_t n, float factor);  // p *= factor
// dst = src with the channel axis moved: NCHW -> NHWC (to_nhwc) or NHWC -> NCHW, `bytes` per
// element (1, 4 or 8); src and dst distinct, both on the context's device.
void permute_nchw(Context& ctx, const void* src, void* dst, int64_t n, int64_t c, int64_t h, int64_t w, int bytes,
                  bool to_nhwc);

}  // namespace ember::cuda
