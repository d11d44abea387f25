// Dense layer.
#include "dense.h"

#include "../core/dispatch.h"
#include "../core/error.h"
#include "cpu/dense.h"
#include "cuda_ops.h"

namespace ember {

Dense::Dense(int64_t units, Activation activation) : units_(units), relu_(activation == Activation::ReLU) {
  EMBER_CHECK(units > 0, ArgumentError, "Dense: units must be > 0, got " + std::to_string(units));
}

Shape Dense::build(const Shape& in) {
  EMBER_CHECK(in.rank() == 1, ShapeError,
              "Dense: expects a per-sample input of 1 dimension (features); given " + in.str() +
                  " (add a Flatten layer before it)");
  in_ = in[0];
  return Shape{units_};
}

std::vector<ParamSpec> Dense::param_specs() const {
  return {{"kernel", Shape{units_, in_}, ParamSpec::Init::GlorotUniform, in_, units_},
          {"bias", Shape{units_}, ParamSpec::Init::Zeros, 0, 0}};
}

const Tensor& Dense::do_forward(const Tensor& x, bool /*training*/) {
  EMBER_CHECK(x.rank() == 2 && x.dim(1) == in_, ShapeError,
              "Dense: expects input (N, " + std::to_string(in_) + "); given " + x.shape().str());
  x_ = x;
  ensure(y_, Shape{x.dim(0), units_}, DType::F32, x.device());
  if (detail::on_gpu(x))
    detail::layer_cuda_ops().dense_forward(x_, params_.at(0), params_.at(1), relu_, y_);
  else
    cpu::dense_forward(x_, params_.at(0), params_.at(1), relu_, y_);
  return y_;
}

const Tensor& Dense::do_backward(const Tensor& dy) {
  // The backend overwrites dy with the pre-activation gradient, so work on our own copy.
  ensure(dy_, dy.shape(), DType::F32, dy.device());
  dy_.copy_from(dy);
  Tensor* dx = nullptr;
  if (needs_input_grad_) {
    ensure(dx_, x_.shape(), DType::F32, x_.device());
    dx = &dx_;
  }
  const bool mask = relu_ && !output_grad_premasked_;
  if (detail::on_gpu(x_))
    detail::layer_cuda_ops().dense_backward(x_, params_.at(0), y_, dy_, mask, dx, grads_.at(0), grads_.at(1));
  else
    cpu::dense_backward(x_, params_.at(0), y_, dy_, mask, dx, grads_.at(0), grads_.at(1));
  return dx ? dx_ : no_input_grad();
}

}  // namespace ember
