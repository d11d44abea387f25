// MaxPool2D layer.
#include "maxpool2d.h"

#include "../core/dispatch.h"
#include "../core/error.h"
#include "cpu/maxpool2d.h"
#include "cuda_ops.h"

namespace ember {

MaxPool2D::MaxPool2D(Size2 pool, std::optional<Size2> strides, Padding padding)
    : pool_(pool), strides_(strides.value_or(pool)), padding_(padding) {
  EMBER_CHECK(pool.h > 0 && pool.w > 0, ArgumentError, "MaxPool2D: pool size must be positive");
  EMBER_CHECK(strides_.h > 0 && strides_.w > 0, ArgumentError, "MaxPool2D: strides must be positive");
}

Shape MaxPool2D::build(const Shape& in) {
  g_ = Pool2dShape{};
  static_cast<WindowGeometry&>(g_) = window_geometry(in, pool_, strides_, padding_, "MaxPool2D", "pool");
  in_shape_ = in;
  return Shape{g_.c, g_.p, g_.q};
}

const Tensor& MaxPool2D::do_forward(const Tensor& x, bool /*training*/) {
  EMBER_CHECK(x.rank() == 4 && x.shape().without_batch() == in_shape_, ShapeError,
              "MaxPool2D: expects input (N, " + std::to_string(g_.c) + ", " + std::to_string(g_.h) + ", " +
                  std::to_string(g_.w) + "); given " + x.shape().str());
  g_.n = x.dim(0);
  if (detail::on_gpu(x)) {  // cuDNN, row-major; its backward needs x and y
    EMBER_CHECK(x.layout() == Layout::RowMajor, ShapeError, "MaxPool2D (cuda): expects NCHW input, got " + x.str());
    x_ = x;
    ensure(y_, Shape{g_.n, g_.c, g_.p, g_.q}, DType::F32, x.device());
    detail::layer_cuda_ops().maxpool2d_forward(g_, x_, y_);
    return y_;
  }
  const Tensor& xn = as_layout(x, Layout::NHWC, x_nhwc_);
  const Shape out{g_.n, g_.c, g_.p, g_.q};
  ensure(y_, out, DType::F32, x.device(), Layout::NHWC);
  ensure(argmax_, out, DType::I32, x.device(), Layout::NHWC);
  cpu::maxpool2d_forward(g_, xn, y_, argmax_);
  if (mask_input_relu_) x_ = xn;  // the ReLU output, for the fused mask in backward
  return y_;
}

const Tensor& MaxPool2D::do_backward(const Tensor& dy) {
  if (!needs_input_grad_) return no_input_grad();
  if (detail::on_gpu(y_)) {
    ensure(dx_, Shape{g_.n, g_.c, g_.h, g_.w}, DType::F32, y_.device());
    detail::layer_cuda_ops().maxpool2d_backward(g_, x_, y_, dy, dx_, mask_input_relu_);
    return dx_;
  }
  const Tensor& gn = as_layout(dy, Layout::NHWC, dy_nhwc_);
  ensure(dx_, Shape{g_.n, g_.c, g_.h, g_.w}, DType::F32, dy.device(), Layout::NHWC);
  cpu::maxpool2d_backward(g_, gn, argmax_, dx_, mask_input_relu_ ? &x_ : nullptr);
  return dx_;
}

}  // namespace ember
