// Conv2D layer: geometry, parameters, and the call into the backend.
#include "conv2d.h"

#include "../core/dispatch.h"
#include "../core/error.h"
#include "cpu/conv2d.h"
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
  g_ = Conv2dShape{};
  static_cast<WindowGeometry&>(g_) = window_geometry(in, kernel_, strides_, padding_, "Conv2D", "kernel");
  g_.k = filters_;
  g_.relu = activation_ == Activation::ReLU;
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

const Tensor& Conv2D::do_forward(const Tensor& x, bool /*training*/) {
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

const Tensor& Conv2D::do_backward(const Tensor& dy) {
  const Conv2dShape g = geometry(x_.dim(0));
  if (detail::on_gpu(x_)) {
    Tensor* gdx = nullptr;
    if (needs_input_grad_) {
      ensure(dx_, x_.shape(), DType::F32, x_.device());
      gdx = &dx_;
    }
    detail::layer_cuda_ops().conv2d_backward(g, x_, params_.at(0), y_, dy, gdx, grads_.at(0), grads_.at(1),
                                             output_grad_premasked_);
    return gdx ? dx_ : no_input_grad();
  }
  const Tensor& g_nhwc = as_layout(dy, Layout::NHWC, dy_nhwc_);
  Tensor* dx = nullptr;
  if (needs_input_grad_) {
    ensure(dx_, x_.shape(), DType::F32, x_.device(), Layout::NHWC);
    dx = &dx_;
  }
  cpu::conv2d_backward(g, x_, params_.at(0), y_, g_nhwc, dx, grads_.at(0), grads_.at(1), output_grad_premasked_);
  return dx ? dx_ : no_input_grad();
}

std::string Conv2D::kernel_info(int64_t batch) const {
  if (!params_.empty() && detail::on_gpu(params_[0]))
    return detail::layer_cuda_ops().conv2d_kernel_info(params_[0].device().index, geometry(batch));
  return cpu::conv2d_kernel_info(geometry(batch));
}

}  // namespace ember
