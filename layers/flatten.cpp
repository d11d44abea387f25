// Flatten layer.
#include "flatten.h"

#include "../core/error.h"

namespace ember {

Shape Flatten::build(const Shape& in) {
  EMBER_CHECK(in.rank() >= 1, ShapeError, "Flatten: expects a per-sample input of at least 1 dimension");
  in_ = in;
  return Shape{in.numel()};
}

void Flatten::do_release_buffers() {
  Layer::do_release_buffers();
  rowmajor_ = y_ = dx_ = Tensor();
}

const Tensor& Flatten::do_forward(const Tensor& x, bool /*training*/) {
  EMBER_CHECK(x.rank() >= 2 && x.shape().without_batch() == in_, ShapeError,
              "Flatten: expects input (N, ...) with per-sample shape " + in_.str() + "; given " + x.shape().str());
  const Tensor& rm = as_layout(x, Layout::RowMajor, rowmajor_);
  y_ = rm.reshape(Shape{x.dim(0), in_.numel()});
  return y_;
}

const Tensor& Flatten::do_backward(const Tensor& dy) {
  EMBER_CHECK(dy.layout() == Layout::RowMajor, ShapeError,
              "Flatten: output gradient must be row-major " + y_.shape().str() + ", given " + dy.str());
  dx_ = dy.reshape(in_.with_batch(dy.dim(0)));
  return dx_;
}

}  // namespace ember
