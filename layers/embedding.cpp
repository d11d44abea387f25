// Embedding and PositionEmbedding layers.
#include "embedding.h"

#include <cmath>

#include "../core/error.h"
#include "layer_config.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"

namespace ember {

namespace {
// Keras' Embedding initialiser: RandomUniform(-0.05, 0.05).
constexpr float kKerasEmbeddingLimit = 0.05f;

ParamSpec table_spec(int64_t rows, int64_t cols, float stddev) {
  return ParamSpec{.name = "embeddings",
                   .shape = Shape{rows, cols},
                   .init = stddev > 0.0f ? ParamSpec::Init::Normal : ParamSpec::Init::Uniform,
                   .scale = stddev > 0.0f ? stddev : kKerasEmbeddingLimit};
}

void check_stddev(float s, const char* who) {
  EMBER_CHECK(std::isfinite(s) && s >= 0.0f, ArgumentError,
              std::string(who) + ": init_stddev must be >= 0 (0: Keras' U(-0.05, 0.05)), got " + std::to_string(s));
}
}  // namespace

Embedding::Embedding(int64_t input_dim, int64_t output_dim, float init_stddev)
    : input_dim_(input_dim), output_dim_(output_dim), init_stddev_(init_stddev) {
  EMBER_CHECK(input_dim >= 1 && output_dim >= 1, ArgumentError,
              "Embedding: input_dim and output_dim must be >= 1, got " + std::to_string(input_dim) + " and " +
                  std::to_string(output_dim));
  check_stddev(init_stddev, "Embedding");
}

Shape Embedding::build(const Shape& in) {
  EMBER_CHECK(in.rank() >= 1 && in.numel() > 0, ShapeError,
              "Embedding: expects per-sample ids (time,) or any non-empty shape, got " + in.str());
  in_ = in;
  std::vector<int64_t> out(in.begin(), in.end());
  out.push_back(output_dim_);
  return Shape(out);
}

std::vector<ParamSpec> Embedding::param_specs() const { return {table_spec(input_dim_, output_dim_, init_stddev_)}; }

const Tensor& Embedding::do_forward(const Tensor& x, bool /*training*/) {
  EMBER_CHECK(params_.size() == 1, Error, "Embedding: build() and bind() first (Model::build does)");
  if (!(x.dtype() == DType::I32 && x.rank() == in_.rank() + 1 && x.shape().without_batch() == in_)) {
    std::string dims = in_.str().substr(1);  // "(8,)" -> "8,)", "(2, 8)" -> "2, 8)"
    if (dims.ends_with(",)")) dims.erase(dims.size() - 2, 1);
    throw ShapeError("Embedding: expects i32 ids (N, " + dims + ", given " + x.str());
  }
  return detail::embedding_forward(state_, params_[0], x);
}

const Tensor& Embedding::do_backward(const Tensor& dy) {
  detail::embedding_backward(state_, dy, grads_.at(0));
  return no_input_grad();  // ids have no gradient
}

std::string Embedding::kernel_info(int64_t, Device device) const {
  return device.is_cuda() ? "ember CUDA gather, sorted-id gradient" : "ember cpu gather, sorted-id gradient";
}

LayerConfig Embedding::config() const {
  return {{"input_dim", config_value(input_dim_)},
          {"output_dim", config_value(output_dim_)},
          {"init_stddev", config_value(init_stddev_)}};
}

// --- PositionEmbedding ----------------------------------------------------------------------

PositionEmbedding::PositionEmbedding(int64_t sequence_length, float init_stddev)
    : length_(sequence_length), init_stddev_(init_stddev) {
  EMBER_CHECK(sequence_length >= 1, ArgumentError,
              "PositionEmbedding: sequence_length must be >= 1, got " + std::to_string(sequence_length));
  check_stddev(init_stddev, "PositionEmbedding");
}

Shape PositionEmbedding::build(const Shape& in) {
  EMBER_CHECK(in.rank() == 2 && in.numel() > 0 && in[0] <= length_, ShapeError,
              "PositionEmbedding: expects per-sample input (time, features) with time <= " + std::to_string(length_) +
                  ", got " + in.str());
  in_ = in;
  return in;
}

std::vector<ParamSpec> PositionEmbedding::param_specs() const { return {table_spec(length_, in_[1], init_stddev_)}; }

const Tensor& PositionEmbedding::do_forward(const Tensor& x, bool /*training*/) {
  EMBER_CHECK(params_.size() == 1, Error, "PositionEmbedding: build() and bind() first (Model::build does)");
  EMBER_CHECK(x.rank() == 3 && x.shape().without_batch() == in_, ShapeError,
              "PositionEmbedding: expects input (N, " + in_.str().substr(1) + ", given " + x.str());
  const int64_t n = x.dim(0), t = in_[0];
  if (!(positions_.shape() == Shape{n, t}) || positions_.device() != x.device()) {
    Tensor p = Tensor::empty(Shape{n, t}, DType::I32, Device::cpu());
    int32_t* d = p.data<int32_t>();
    for (int64_t i = 0; i < n * t; ++i) d[i] = static_cast<int32_t>(i % t);
    positions_ = x.device().is_cpu() ? p : p.to(x.device());
  }
  const Tensor& rows = detail::embedding_forward(state_, params_[0], positions_, /*check_ids=*/false);  // 0..T-1
  const Tensor& xr = as_layout(x, Layout::RowMajor, x_copy_);
  ensure(y_, x.shape(), DType::F32, x.device());
  detail::elementwise_binary(detail::BinaryOp::Add, xr, rows, y_);
  return y_;
}

const Tensor& PositionEmbedding::do_backward(const Tensor& dy) {
  const Tensor& g = as_layout(dy, Layout::RowMajor, dy_copy_);
  detail::embedding_backward(state_, g, grads_.at(0));
  if (!needs_input_grad()) return no_input_grad();
  ensure(dx_, g.shape(), DType::F32, g.device());
  detail::elementwise_scale(1.0f, g, dx_);  // d(x + P)/dx: the gradient itself
  return dx_;
}

std::string PositionEmbedding::kernel_info(int64_t, Device device) const {
  return device.is_cuda() ? "ember CUDA gather, sorted-id gradient" : "ember cpu gather, sorted-id gradient";
}

LayerConfig PositionEmbedding::config() const {
  return {{"sequence_length", config_value(length_)}, {"init_stddev", config_value(init_stddev_)}};
}

void PositionEmbedding::do_release_buffers() {
  positions_ = x_copy_ = y_ = dy_copy_ = dx_ = Tensor();
  Layer::do_release_buffers();
}

}  // namespace ember
