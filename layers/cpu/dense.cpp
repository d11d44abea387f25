// Dense on oneDNN sgemm.
#include "dense.h"

#include <algorithm>

#include "../../core/cpu/gemm.h"
#include "../../core/error.h"
#include "relu.h"

namespace ember::cpu {

namespace {
void check(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& y) {
  EMBER_CHECK(x.rank() == 2 && w.rank() == 2 && x.dim(1) == w.dim(1), ShapeError,
              "dense (cpu): input " + x.shape().str() + " does not fit weights " + w.shape().str() +
                  " (expected input (N, " + std::to_string(w.rank() == 2 ? w.dim(1) : -1) + "))");
  EMBER_CHECK(b.shape() == Shape{w.dim(0)}, ShapeError,
              "dense (cpu): bias must be (" + std::to_string(w.dim(0)) + ",), got " + b.shape().str());
  EMBER_CHECK(y.shape() == (Shape{x.dim(0), w.dim(0)}), ShapeError,
              "dense (cpu): output must be " + Shape{x.dim(0), w.dim(0)}.str() + ", got " + y.shape().str());
  for (const Tensor* t : {&x, &w, &b, &y})
    EMBER_CHECK(t->dtype() == DType::F32 && t->device().is_cpu() && t->layout() == Layout::RowMajor, ShapeError,
                "dense (cpu): expects f32 row-major cpu tensors, got " + t->str());
}
}  // namespace

void dense_forward(const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Tensor& y) {
  check(x, w, b, y);
  const int64_t n = x.dim(0), in = x.dim(1), out = w.dim(0);
  float* yp = y.f32();
  const float* bp = b.f32();
  sgemm(false, true, n, out, in, 1.0f, x.f32(), in, w.f32(), in, 0.0f, yp, out);
  for (int64_t i = 0; i < n; ++i) {
    float* row = yp + i * out;
    if (relu) {
#pragma omp simd
      for (int64_t j = 0; j < out; ++j) row[j] = std::max(row[j] + bp[j], 0.0f);
    } else {
#pragma omp simd
      for (int64_t j = 0; j < out; ++j) row[j] += bp[j];
    }
  }
}

void dense_backward(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy, bool relu, Tensor& dz,
                    Tensor* dx, Tensor& dw, Tensor& db) {
  check(x, w, db, dy);
  EMBER_CHECK(dw.shape() == w.shape() && y.shape() == dy.shape(), ShapeError,
              "dense (cpu): gradient shapes do not match: dw " + dw.shape().str() + ", dy " + dy.shape().str());
  if (dx)
    EMBER_CHECK(dx->shape() == x.shape(), ShapeError,
                "dense (cpu): input gradient must be " + x.shape().str() + ", got " + dx->shape().str());
  const int64_t n = x.dim(0), in = x.dim(1), out = w.dim(0);
  if (relu) relu_backward(y, dy, dz);  // checks dz: f32, dy's shape and layout
  const float* g = relu ? dz.f32() : dy.f32();
  sgemm(true, false, out, in, n, 1.0f, g, out, x.f32(), in, 0.0f, dw.f32(), in);
  float* dbp = db.f32();
  for (int64_t j = 0; j < out; ++j) dbp[j] = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
#pragma omp simd
    for (int64_t j = 0; j < out; ++j) dbp[j] += g[i * out + j];
  }
  if (dx) sgemm(false, false, n, in, out, 1.0f, g, out, w.f32(), in, 0.0f, dx->f32(), in);
}

}  // namespace ember::cpu
