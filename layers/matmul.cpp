// matmul: oneDNN's sgemm on the CPU, cuBLAS on a GPU.
#include "matmul.h"

#include "../core/cpu/gemm.h"
#include "../core/dispatch.h"
#include "../core/error.h"
#include "cuda_ops.h"

namespace ember {

void matmul(const Tensor& a, const Tensor& b, Tensor& c) {
  if (detail::on_gpu(a)) {  // cuBLAS, queued on the device's stream (the result is read by a copy)
    detail::layer_cuda_ops().matmul(a, b, c);
    return;
  }
  EMBER_CHECK(a.rank() == 2 && b.rank() == 2 && c.rank() == 2 && a.dim(1) == b.dim(0) && c.dim(0) == a.dim(0) &&
                  c.dim(1) == b.dim(1),
              ShapeError,
              "matmul: " + a.shape().str() + " x " + b.shape().str() + " -> " + c.shape().str() + " do not fit");
  for (const Tensor* t : {&a, &b, static_cast<const Tensor*>(&c)})
    EMBER_CHECK(t->dtype() == DType::F32 && t->layout() == Layout::RowMajor && t->device().is_cpu(), ShapeError,
                "matmul: expects f32 row-major tensors on the cpu (as the first operand), got " + t->str());
  cpu::sgemm(false, false, a.dim(0), b.dim(1), a.dim(1), 1.0f, a.f32(), a.dim(1), b.f32(), b.dim(1), 0.0f, c.f32(),
             c.dim(1));
}

Tensor matmul(const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.rank() == 2 && b.rank() == 2, ShapeError, "matmul: expects 2-D tensors");
  Tensor c = Tensor::empty(Shape{a.dim(0), b.dim(1)}, DType::F32, a.device());
  matmul(a, b, c);
  return c;
}

}  // namespace ember
