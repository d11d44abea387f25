// The merge layers' elementwise ops on the GPU: the contracts of layers/cpu/elementwise.h, on the
// device's stream.
#pragma once

#include <cstdint>

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"
#include "../elementwise.h"

namespace ember::cuda {

void binary(Context& ctx, ::ember::detail::BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y);
void scale(Context& ctx, float alpha, const Tensor& x, Tensor& y);
void maximum_grad(Context& ctx, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& claimed, Tensor& dx);
void copy_columns(Context& ctx, const Tensor& src, int64_t src_stride, int64_t src_offset, Tensor& dst,
                  int64_t dst_stride, int64_t dst_offset, int64_t rows, int64_t cols);

}  // namespace ember::cuda
