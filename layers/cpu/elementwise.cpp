// The merge layers' elementwise ops on the CPU (plain loops the compiler vectorises).
#include "elementwise.h"

#include <cstring>

#include "../../core/error.h"

namespace ember::cpu {

namespace {
void check_same(const Tensor& a, const Tensor& b, const char* what) {
  EMBER_CHECK(a.shape() == b.shape() && a.layout() == b.layout() && a.dtype() == DType::F32 &&
                  b.dtype() == DType::F32 && a.device().is_cpu() && b.device().is_cpu(),
              ShapeError, std::string("elementwise (cpu): ") + what + ": " + a.str() + " vs " + b.str());
}
}  // namespace

void binary(detail::BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y) {
  check_same(a, b, "the inputs must match");
  check_same(a, y, "the output must match the inputs");
  const float* pa = a.f32();
  const float* pb = b.f32();
  float* py = y.f32();
  const int64_t n = a.numel();
  using detail::BinaryOp;
  switch (op) {
    case BinaryOp::Add:
      for (int64_t i = 0; i < n; ++i) py[i] = pa[i] + pb[i];
      break;
    case BinaryOp::Subtract:
      for (int64_t i = 0; i < n; ++i) py[i] = pa[i] - pb[i];
      break;
    case BinaryOp::Multiply:
      for (int64_t i = 0; i < n; ++i) py[i] = pa[i] * pb[i];
      break;
    case BinaryOp::Maximum:
      for (int64_t i = 0; i < n; ++i) py[i] = pb[i] > pa[i] ? pb[i] : pa[i];
      break;
  }
}

void scale(float alpha, const Tensor& x, Tensor& y) {
  check_same(x, y, "the output must match the input");
  const float* px = x.f32();
  float* py = y.f32();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) py[i] = alpha * px[i];
}

void maximum_grad(const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& claimed, Tensor& dx) {
  check_same(x, y, "the input must match the output");
  check_same(y, dy, "the output gradient must match the output");
  check_same(y, claimed, "the claims must match the output");
  check_same(y, dx, "the input gradient must match the output");
  const float* px = x.f32();
  const float* py = y.f32();
  const float* pg = dy.f32();
  float* pc = claimed.f32();
  float* pd = dx.f32();
  for (int64_t i = 0, n = x.numel(); i < n; ++i) {
    const bool mine = pc[i] == 0.0f && px[i] == py[i];
    pd[i] = mine ? pg[i] : 0.0f;
    if (mine) pc[i] = 1.0f;
  }
}

void copy_columns(const Tensor& src, int64_t src_stride, int64_t src_offset, Tensor& dst, int64_t dst_stride,
                  int64_t dst_offset, int64_t rows, int64_t cols) {
  EMBER_CHECK(src.device().is_cpu() && dst.device().is_cpu() && src.dtype() == DType::F32 &&
                  dst.dtype() == DType::F32 && rows >= 0 && cols >= 0 && src_offset + cols <= src_stride &&
                  dst_offset + cols <= dst_stride && rows * src_stride <= src.numel() &&
                  rows * dst_stride <= dst.numel(),
              ShapeError, "copy_columns (cpu): the blocks do not fit " + src.str() + " -> " + dst.str());
  const float* s = src.f32();
  float* d = dst.f32();
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(d + r * dst_stride + dst_offset, s + r * src_stride + src_offset, static_cast<size_t>(cols) * 4);
}

}  // namespace ember::cpu
