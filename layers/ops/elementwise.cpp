// The elementwise ops' dispatch.
#include "elementwise.h"

#include "../../core/dispatch.h"
#include "../cpu/elementwise.h"
#include "../cuda_ops.h"

namespace ember::detail {

void elementwise_binary(BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y) {
  if (on_gpu(a))
    layer_cuda_ops().binary(op, a, b, y);
  else
    cpu::binary(op, a, b, y);
}

void elementwise_scale(float alpha, const Tensor& x, Tensor& y) {
  if (on_gpu(x))
    layer_cuda_ops().scale(alpha, x, y);
  else
    cpu::scale(alpha, x, y);
}

void elementwise_maximum_grad(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& claimed, Tensor& dx) {
  if (on_gpu(x))
    layer_cuda_ops().maximum_grad(x, y, dy, claimed, dx);
  else
    cpu::maximum_grad(x, y, dy, claimed, dx);
}

void elementwise_copy_columns(const Tensor& src, int64_t src_stride, int64_t src_offset, Tensor& dst,
                              int64_t dst_stride, int64_t dst_offset, int64_t rows, int64_t cols) {
  if (on_gpu(src))
    layer_cuda_ops().copy_columns(src, src_stride, src_offset, dst, dst_stride, dst_offset, rows, cols);
  else
    cpu::copy_columns(src, src_stride, src_offset, dst, dst_stride, dst_offset, rows, cols);
}

}  // namespace ember::detail
