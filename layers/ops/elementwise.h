// The elementwise ops' one dispatch (layers/cpu/elementwise.h for the contracts): the CPU twin or
// the CUDA module's, by the tensors' device. Private to the library.
#pragma once

#include <cstdint>

#include "../../core/tensor.h"
#include "../elementwise.h"

namespace ember::detail {

void elementwise_binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y);
void elementwise_scale(float alpha, const Tensor& x, Tensor& y);
void elementwise_maximum_grad(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& claimed, Tensor& dx);
void elementwise_copy_columns(const Tensor& src, int64_t src_stride, int64_t src_offset, Tensor& dst,
                              int64_t dst_stride, int64_t dst_offset, int64_t rows, int64_t cols);

}  // namespace ember::detail
