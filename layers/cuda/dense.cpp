// Dense with cuBLAS. cuBLAS is column-major: a row-major (r x c) matrix is its column-major
// (c x r) transpose, so each row-major product below is written as the transposed product.
#include "dense.h"

#include "../../core/cuda/check.h"
#include "dense_kernels.h"
#include "relu.h"

namespace ember::cuda {

namespace {
void check(const Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  const Device d = Device::cuda(ctx.device());
  EMBER_CHECK(x.rank() == 2 && w.rank() == 2 && x.dim(1) == w.dim(1) && b.shape() == Shape{w.dim(0)} &&
                  y.shape() == (Shape{x.dim(0), w.dim(0)}),
              ShapeError,
              "dense (cuda): x " + x.shape().str() + ", w " + w.shape().str() + ", b " + b.shape().str() + ", y " +
                  y.shape().str() + " do not fit");
  for (const Tensor* t : {&x, &w, &b, &y})
    EMBER_CHECK(t->dtype() == DType::F32 && t->device() == d && t->layout() == Layout::RowMajor, ShapeError,
                "dense (cuda): expects f32 row-major tensors on " + d.str() + ", got " + t->str());
}
const float* cp(const Tensor& t) { return static_cast<const float*>(t.raw()); }
float* mp(Tensor& t) { return static_cast<float*>(t.raw()); }
}  // namespace

void dense_forward(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Tensor& y) {
  check(ctx, x, w, b, y);
  const int n = static_cast<int>(x.dim(0)), in = static_cast<int>(x.dim(1)), out = static_cast<int>(w.dim(0));
  const float one = 1.0f, zero = 0.0f;
  // Y(N,O) = X(N,I) W(O,I)^T  <=>  col-major Y^T(O,N) = W(O,I) X^T(I,N)
  EMBER_CUBLAS_CHECK(
      cublasSgemm(ctx.blas(), CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, cp(w), in, cp(x), in, &zero, mp(y), out));
  bias_activation(ctx, mp(y), cp(b), n, out, relu);
}

void dense_backward(Context& ctx, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy, bool relu,
                    Tensor& dz, Tensor* dx, Tensor& dw, Tensor& db) {
  check(ctx, x, w, db, dy);
  EMBER_CHECK(dw.shape() == w.shape() && y.shape() == dy.shape(), ShapeError,
              "dense (cuda): gradient shapes do not match");
  if (dx) EMBER_CHECK(dx->shape() == x.shape(), ShapeError, "dense (cuda): dx must be " + x.shape().str());
  const int n = static_cast<int>(x.dim(0)), in = static_cast<int>(x.dim(1)), out = static_cast<int>(w.dim(0));
  if (relu) relu_backward(ctx, y, dy, dz);  // checks dz: f32, dy's shape, this device
  const Tensor& g = relu ? dz : dy;
  const float one = 1.0f, zero = 0.0f;
  // dW(O,I) = dY(N,O)^T X(N,I)  <=>  col-major dW^T(I,O) = X^T(I,N) dY(N,O)
  EMBER_CUBLAS_CHECK(
      cublasSgemm(ctx.blas(), CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, cp(x), in, cp(g), out, &zero, mp(dw), in));
  column_sums(ctx, cp(g), mp(db), n, out);
  if (dx) {
    // dX(N,I) = dY(N,O) W(O,I)  <=>  col-major dX^T(I,N) = W^T(I,O) dY^T(O,N)
    EMBER_CUBLAS_CHECK(
        cublasSgemm(ctx.blas(), CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, cp(w), in, cp(g), out, &zero, mp(*dx), in));
  }
}

void matmul(Context& ctx, const Tensor& a, const Tensor& b, Tensor& c) {
  const Device d = Device::cuda(ctx.device());
  for (const Tensor* t : {&a, &b, static_cast<const Tensor*>(&c)})
    EMBER_CHECK(t->rank() == 2 && t->dtype() == DType::F32 && t->device() == d && t->layout() == Layout::RowMajor,
                ShapeError, "matmul (cuda): expects 2-D f32 row-major tensors on " + d.str() + ", got " + t->str());
  EMBER_CHECK(a.dim(1) == b.dim(0) && c.dim(0) == a.dim(0) && c.dim(1) == b.dim(1), ShapeError,
              "matmul (cuda): " + a.shape().str() + " x " + b.shape().str() + " -> " + c.shape().str() + " do not fit");
  const int m = static_cast<int>(a.dim(0)), k = static_cast<int>(a.dim(1)), n = static_cast<int>(b.dim(1));
  if (m == 0 || n == 0) return;
  const float one = 1.0f, zero = 0.0f;
  // C(M,N) = A(M,K) B(K,N)  <=>  col-major C^T(N,M) = B^T(N,K) A^T(K,M)
  EMBER_CUBLAS_CHECK(
      cublasSgemm(ctx.blas(), CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, cp(b), n, cp(a), k, &zero, mp(c), n));
}

}  // namespace ember::cuda
