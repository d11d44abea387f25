// The merge layers' elementwise ops on the CPU: flat over memory, so every tensor of one call
// shares a shape and a layout (the callers convert); outputs may alias inputs.
#pragma once

#include <cstdint>

#include "../../core/tensor.h"
#include "../elementwise.h"

namespace ember::cpu {

// y = a op b (Maximum: a where a >= b, so ties and a NaN in b keep a).
void binary(detail::BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y);
// y = alpha * x.
void scale(float alpha, const Tensor& x, Tensor& y);
// Maximum's input gradient for one input x of y = max(x_0, ..., x_n): dx = dy where x equals y
// and no earlier input has claimed the element (`claimed` != 0), which it then claims; else 0.
// Called for x_0, x_1, ... in order with `claimed` zeroed first: each element's gradient goes to
// the first input that holds the maximum (TensorFlow's rule), whole, as the forward chose it.
void maximum_grad(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& claimed, Tensor& dx);
// Row-major blocks: for r in [0, rows): dst[r * dst_stride + dst_offset + c] = src[r * src_stride +
// src_offset + c], c in [0, cols) (Concatenate's pieces; strides and offsets in elements).
void copy_columns(const Tensor& src, int64_t src_stride, int64_t src_offset, Tensor& dst, int64_t dst_stride,
                  int64_t dst_offset, int64_t rows, int64_t cols);

}  // namespace ember::cpu
