// Conv2D layer: geometry, parameters, and the call into the backend.
#include "conv2d.h"

#include "../core/error.h"
#include "cpu/conv2d.h"
#include "../core/dispatch.h"
#include "cuda_ops.h"

namespace ember {

Conv2D::Conv2D(int64_t filters, Size2 kernel, Activation activation, Padding padding, Size2 strides)
    : filters_(filters), kernel_(kernel), strides_(strides), activation_(activation), padding_(padding) {
  EMBER_CHECK(filters > 0, ArgumentError, "Conv2D: filters must be > 0, got " + std::to_string(filters));
  EMBER_CHECK(kernel.h > 0 && kernel.w > 0, ArgumentError,
              "Conv2D: kernel size must be positive, got " + std::to_string(kernel.h) + "x" + std::to_string(kernel.w));
  EMBER_CHECK(strides.h > 0 && strides.w > 0, ArgumentError, "Conv2D: strides must be positive");
}

Shape Conv2D::build(const Shape& in) {
  EMBER_CHECK(in.rank() == 3, ShapeError,
              "Conv2D: expects a per-sample input of 3 dimensions (C, H, W); given " + in.str());
  g_ = Conv2dShape{};
  g_.c = in[0];
  g_.h = in[1];
  g_.w = in[2];
  g_.k = filters_;
  g_.r = kernel_.h;
  g_.s = kernel_.w;
  g_.stride_h = strides_.h;
  g_.stride_w = strides_.w;
  const AxisGeometry ah = axis_geometry(g_.h, g_.r, g_.stride_h, padding_);
  const AxisGeometry aw = axis_geometry(g_.w, g_.s, g_.stride_w, padding_);
  g_.pad_top = ah.pad_before;
  g_.pad_bottom = ah.pad_after;
  g_.pad_left = aw.pad_before;
  g_.pad_right = aw.pad_after;
  g_.p = ah.out;
  g_.q = aw.out;
  g_.relu = activation_ == Activation::ReLU;
  EMBER_CHECK(g_.p > 0 && g_.q > 0, ShapeError,
              "Conv2D: a " + std::to_string(g_.r) + "x" + std::to_string(g_.s) + " kernel does not fit the input " +
                  in.str() + " with valid padding");
  return Shape{g_.k, g_.p, g_.q};
}

std::vector<ParamSpec> Conv2D::param_specs() const {
  const int64_t rs = g_.r * g_.s;
  return {{"kernel", Shape{g_.k, g_.c, g_.r, g_.s}, ParamSpec::Init::GlorotUniform, g_.c * rs, g_.k * rs},
          {"bias", Shape{g_.k}, ParamSpec::Init::Zeros, 0, 0}};
}

Conv2dShape Conv2D::geometry(int64_t batch) const {
  Conv2dShape g = g_;
  g.n = batch;
  return g;
}

const Tensor& Conv2D::forward(const Tensor& x, bool /*training*/) {
  EMBER_CHECK(g_.k > 0, Error, "Conv2D: forward() before build()");
  EMBER_CHECK(x.rank() == 4 && x.shape().without_batch() == (Shape{g_.c, g_.h, g_.w}), ShapeError,
              "Conv2D: expects input (N, " + std::to_string(g_.c) + ", " + std::to_string(g_.h) + ", " +
                  std::to_string(g_.w) + "); given " + x.shape().str());
  const Conv2dShape g = geometry(x.dim(0));
  if (detail::on_gpu(x)) {  // cuDNN runs on the row-major (NCHW) activations
    EMBER_CHECK(x.layout() == Layout::RowMajor, ShapeError, "Conv2D (cuda): expects NCHW input, got " + x.str());
    x_ = x;
    ensure(y_, Shape{g.n, g.k, g.p, g.q}, DType::F32, x.device());
    detail::layer_cuda_ops().conv2d_forward(g, x_, params_.at(0), params_.at(1), y_);
    return y_;
  }
  x_ = as_layout(x, Layout::NHWC, x_nhwc_);
  ensure(y_, Shape{g.n, g.k, g.p, g.q}, DType::F32, x.device(), Layout::NHWC);
  cpu::conv2d_forward(g, x_, params_.at(0), params_.at(1), y_);
  return y_;
}

const Tensor& Conv2D::backward(const Tensor& dy) {
  EMBER_CHECK(x_.defined(), Error, "Conv2D: backward() before forward()");
  EMBER_CHECK(dy.shape() == y_.shape(), ShapeError,
              "Conv2D: output gradient must be " + y_.shape().str() + ", given " + dy.shape().str());
  const Conv2dShape g = geometry(x_.dim(0));
  static const Tensor none;
  if (detail::on_gpu(x_)) {
    Tensor* gdx = nullptr;
    if (needs_input_grad_) {
      ensure(dx_, x_.shape(), DType::F32, x_.device());
      gdx = &dx_;
    }
    detail::layer_cuda_ops().conv2d_backward(g, x_, params_.at(0), y_, dy, gdx, grads_.at(0), grads_.at(1), output_grad_premasked_);
    return gdx ? dx_ : none;
  }
  const Tensor& g_nhwc = as_layout(dy, Layout::NHWC, dy_nhwc_);
  Tensor* dx = nullptr;
  if (needs_input_grad_) {
    ensure(dx_, x_.shape(), DType::F32, x_.device(), Layout::NHWC);
    dx = &dx_;
  }
  cpu::conv2d_backward(g, x_, params_.at(0), y_, g_nhwc, dx, grads_.at(0), grads_.at(1), output_grad_premasked_);
  return dx ? dx_ : none;
}

std::string Conv2D::kernel_info(int64_t batch) const {
  if (!params_.empty() && detail::on_gpu(params_[0]))
    return detail::layer_cuda_ops().conv2d_kernel_info(params_[0].device().index, geometry(batch));
  return cpu::conv2d_kernel_info(geometry(batch));
}

}  // namespace ember
