// Dense under the mixed_bf16 policy (dense.h): the three products on matmul_bf16.
#include "../../core/error.h"
#include "dense.h"
#include "matmul_bf16.h"
#include "relu.h"

namespace ember::cpu {

namespace {
void check(const Tensor& t, const Shape& want, const char* what) {
  EMBER_CHECK(t.shape() == want && t.dtype() == DType::F32 && t.device().is_cpu() && t.layout() == Layout::RowMajor,
              ShapeError,
              std::string("dense (cpu, bf16): ") + what + " must be an f32 row-major cpu tensor of shape " +
                  want.str() + ", got " + t.str());
}

const bf16* weights_bf16(const Tensor& w, Bf16Buffers& keep) {
  keep.w.resize(size_t(w.numel()));
  to_bf16(w.f32(), keep.w.data(), w.numel());
  return keep.w.data();
}
}  // namespace

void dense_forward_bf16(const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Tensor& y, Bf16Buffers& keep) {
  EMBER_CHECK(x.rank() == 2 && w.rank() == 2 && x.dim(1) == w.dim(1), ShapeError,
              "dense (cpu, bf16): input " + x.shape().str() + " does not fit weights " + w.shape().str());
  const int64_t n = x.dim(0), in = x.dim(1), out = w.dim(0);
  check(x, Shape{n, in}, "input");
  check(b, Shape{out}, "bias");
  check(y, Shape{n, out}, "output");
  const bf16* w16 = weights_bf16(w, keep);
  keep.x.resize(size_t(x.numel()));
  to_bf16(x.f32(), keep.x.data(), x.numel());
  matmul_bf16(false, true, n, out, in, keep.x.data(), w16, y.f32(), b.f32(), relu);
}

void dense_backward_bf16(const Tensor& w, const Tensor& y, const Tensor& dy, bool relu, Tensor& dz, Tensor* dx,
                         Tensor& dw, Tensor& db, Bf16Buffers& keep) {
  EMBER_CHECK(w.rank() == 2 && y.rank() == 2 && y.dim(1) == w.dim(0), ShapeError,
              "dense (cpu, bf16): output " + y.shape().str() + " does not fit weights " + w.shape().str());
  const int64_t n = y.dim(0), out = w.dim(0), in = w.dim(1);
  check(dy, y.shape(), "output gradient");
  check(dw, w.shape(), "weight gradient");
  check(db, Shape{out}, "bias gradient");
  if (dx) check(*dx, Shape{n, in}, "input gradient");
  EMBER_CHECK(keep.x.size() == size_t(n * in), Error, "dense (cpu, bf16): backward before forward");
  if (relu) relu_backward(y, dy, dz);
  const float* g = relu ? dz.f32() : dy.f32();
  dense_bias_gradient(g, n, out, db.f32());
  keep.dy.resize(size_t(n * out));
  to_bf16(g, keep.dy.data(), n * out);
  matmul_bf16(true, false, out, in, n, keep.dy.data(), keep.x.data(), dw.f32());
  if (dx) matmul_bf16(false, false, n, in, out, keep.dy.data(), weights_bf16(w, keep), dx->f32());
}

}  // namespace ember::cpu
