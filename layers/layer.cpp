// Layer defaults: parameter binding and Keras' initialisers.
#include "layer.h"

#include <cmath>

#include "../core/error.h"

namespace ember {

namespace {
void check_dtype(const Layer& l, const Tensor& x) {
  EMBER_CHECK(x.dtype() == DType::F32 || l.takes_ids(), ShapeError,
              l.type() + " '" + l.name() + "': expects f32 input, given " + x.str() +
                  (x.dtype() == DType::I32 ? " (i32 ids go to an Embedding first)" : ""));
}
}  // namespace

const Tensor& Layer::forward(const Tensor& x, bool training) {
  check_dtype(*this, x);
  const Tensor& y = do_forward(x, training);
  out_shape_ = y.shape();
  forwarded_ = true;
  released_ = false;
  return y;
}

namespace {
std::string released_note(bool released) {
  return released ? " (the last forward was an inference pass, evaluate or predict, which frees its buffers)" : "";
}
}  // namespace

void Layer::release_buffers() {
  do_release_buffers();
  if (forwarded_) released_ = true;
  forwarded_ = false;
}

const Tensor& Layer::backward(const Tensor& dy) {
  EMBER_CHECK(forwarded_, Error, type() + ": backward() before forward()" + released_note(released_));
  EMBER_CHECK(dy.shape() == out_shape_, ShapeError,
              type() + ": output gradient must be " + out_shape_.str() + ", given " + dy.shape().str());
  return do_backward(dy);
}

Shape Layer::build_inputs(const std::vector<Shape>& sample_shapes) {
  EMBER_CHECK(sample_shapes.size() == 1, ArgumentError,
              type() + " takes one input, given " + std::to_string(sample_shapes.size()));
  return build(sample_shapes.front());
}

const Tensor& Layer::forward_inputs(const std::vector<const Tensor*>& xs, bool training) {
  for (const Tensor* x : xs) check_dtype(*this, *x);
  const Tensor& y = do_forward_inputs(xs, training);
  out_shape_ = y.shape();
  forwarded_ = true;
  released_ = false;
  return y;
}

const std::vector<Tensor>& Layer::backward_inputs(const Tensor& dy) {
  EMBER_CHECK(forwarded_, Error, type() + ": backward_inputs() before forward_inputs()" + released_note(released_));
  EMBER_CHECK(dy.shape() == out_shape_, ShapeError,
              type() + ": output gradient must be " + out_shape_.str() + ", given " + dy.shape().str());
  return do_backward_inputs(dy);
}

const Tensor& Layer::do_forward_inputs(const std::vector<const Tensor*>& xs, bool training) {
  EMBER_CHECK(xs.size() == 1 && xs.front() != nullptr, ArgumentError,
              type() + " takes one input, given " + std::to_string(xs.size()));
  return do_forward(*xs.front(), training);
}

const std::vector<Tensor>& Layer::do_backward_inputs(const Tensor& /*dy*/) {
  throw Error(type() + " takes one input: call backward(), not backward_inputs()");
}

const Tensor& Layer::no_input_grad() {
  static const Tensor none;
  return none;
}

void Layer::bind(std::vector<Tensor> params, std::vector<Tensor> grads) {
  const auto specs = param_specs();
  EMBER_CHECK(params.size() == specs.size() && grads.size() == specs.size(), ArgumentError,
              type() + ": bind() got " + std::to_string(params.size()) + " parameters for " +
                  std::to_string(specs.size()) + " specs");
  for (size_t i = 0; i < specs.size(); ++i)
    EMBER_CHECK(params[i].shape() == specs[i].shape && grads[i].shape() == specs[i].shape, ShapeError,
                type() + ": parameter '" + specs[i].name + "' must be " + specs[i].shape.str() + ", got " +
                    params[i].shape().str());
  params_ = std::move(params);
  grads_ = std::move(grads);
}

void Layer::init_params(Rng& rng) {
  const auto specs = param_specs();
  for (size_t i = 0; i < specs.size() && i < params_.size(); ++i) {
    Tensor& p = params_[i];
    float* d = p.f32();
    switch (specs[i].init) {
      case ParamSpec::Init::Zeros:
      case ParamSpec::Init::Ones:
        p.fill(specs[i].init == ParamSpec::Init::Ones ? 1.0f : 0.0f);
        continue;
      case ParamSpec::Init::Uniform:
        for (int64_t j = 0; j < p.numel(); ++j) d[j] = rng.uniform(-specs[i].scale, specs[i].scale);
        continue;
      case ParamSpec::Init::Normal:
        for (int64_t j = 0; j < p.numel(); ++j) d[j] = specs[i].scale * rng.normal();
        continue;
      case ParamSpec::Init::GlorotUniform:
        break;
    }
    // Glorot (Xavier) uniform: U(-l, l), l = sqrt(6 / (fan_in + fan_out)), Keras' default.
    const float limit = std::sqrt(6.0f / static_cast<float>(specs[i].fan_in + specs[i].fan_out));
    for (int64_t j = 0; j < p.numel(); ++j) d[j] = rng.uniform(-limit, limit);
  }
}

void Layer::bind_state(std::vector<Tensor> state) {
  const auto specs = state_specs();
  EMBER_CHECK(state.size() == specs.size(), ArgumentError,
              type() + ": bind_state() got " + std::to_string(state.size()) + " tensors for " +
                  std::to_string(specs.size()) + " specs");
  for (size_t i = 0; i < specs.size(); ++i)
    EMBER_CHECK(
        state[i].shape() == specs[i].shape, ShapeError,
        type() + ": state '" + specs[i].name + "' must be " + specs[i].shape.str() + ", got " + state[i].shape().str());
  state_tensors_ = std::move(state);
}

int64_t Layer::num_non_trainable() const {
  int64_t n = 0;
  for (const auto& s : state_specs())
    if (s.averaged) n += s.shape.numel();
  return n;
}

int64_t Layer::num_params() const {
  int64_t n = 0;
  for (const auto& s : param_specs()) n += s.shape.numel();
  return n;
}

}  // namespace ember
