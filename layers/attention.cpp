// MultiHeadAttention layer: the qkv projection (Dense's op), the attention op, the output
// projection (Dense's op), each with its own op state.
#include "attention.h"

#include <cmath>

#include "../core/error.h"
#include "attention_math.h"
#include "layer_config.h"
#include "ops/attention.h"
#include "ops/dense.h"

namespace ember {

MultiHeadAttention::MultiHeadAttention(int64_t num_heads, int64_t key_dim, AttentionOptions options)
    : heads_(num_heads), key_dim_(key_dim), options_(options) {
  EMBER_CHECK(num_heads >= 1 && key_dim >= 1 && options.value_dim >= 0 && options.output_dim >= 0, ArgumentError,
              "MultiHeadAttention: num_heads and key_dim must be >= 1 and value_dim, output_dim >= 0, got " +
                  std::to_string(num_heads) + ", " + std::to_string(key_dim) + ", " +
                  std::to_string(options.value_dim) + ", " + std::to_string(options.output_dim));
  for (const float s : {options.init_stddev, options.output_init_stddev})
    EMBER_CHECK(std::isfinite(s) && s >= 0.0f, ArgumentError,
                "MultiHeadAttention: an init_stddev must be >= 0 (0: Glorot-uniform), got " + std::to_string(s));
  EMBER_CHECK(std::isfinite(options.dropout) && options.dropout >= 0.0f && options.dropout < 1.0f, ArgumentError,
              "MultiHeadAttention: dropout must be in [0, 1), got " + std::to_string(options.dropout));
  if (options_.value_dim == 0) options_.value_dim = key_dim;
  dropout_.threshold = static_cast<uint32_t>(std::ceil(static_cast<double>(options.dropout) * detail::kCounterBase));
  dropout_.scale = 1.0f / (1.0f - options.dropout);
}

std::vector<StateSpec> MultiHeadAttention::state_specs() const {
  // With dropout, Dropout's step counter [lo, hi] (layers/random_bits.h), advanced alike by every replica.
  if (options_.dropout == 0.0f) return {};
  return {StateSpec{.name = "step", .shape = Shape{2}, .init = 0.0f, .averaged = false}};
}

MultiHeadAttention::~MultiHeadAttention() = default;

Shape MultiHeadAttention::build(const Shape& in) {
  EMBER_CHECK(in.rank() == 2 && in.numel() > 0, ShapeError,
              "MultiHeadAttention: expects per-sample input (time, features), got " + in.str());
  in_ = in;
  out_dim_ = options_.output_dim > 0 ? options_.output_dim : in[1];
  return Shape{in[0], out_dim_};
}

std::vector<ParamSpec> MultiHeadAttention::param_specs() const {
  const int64_t c = in_[1], w = heads_ * (2 * key_dim_ + options_.value_dim), hv = heads_ * options_.value_dim;
  const auto kernel = [](std::string name, Shape shape, int64_t fan_in, int64_t fan_out, float stddev) {
    return ParamSpec{.name = std::move(name),
                     .shape = std::move(shape),
                     .init = stddev > 0.0f ? ParamSpec::Init::Normal : ParamSpec::Init::GlorotUniform,
                     .fan_in = fan_in,
                     .fan_out = fan_out,
                     .scale = stddev};
  };
  return {kernel("qkv_kernel", Shape{w, c}, c, heads_ * key_dim_, options_.init_stddev),
          ParamSpec{.name = "qkv_bias", .shape = Shape{w}, .init = ParamSpec::Init::Zeros},
          kernel("output_kernel", Shape{out_dim_, hv}, hv, out_dim_, options_.output_init_stddev),
          ParamSpec{.name = "output_bias", .shape = Shape{out_dim_}, .init = ParamSpec::Init::Zeros}};
}

const Tensor& MultiHeadAttention::do_forward(const Tensor& x, bool training) {
  EMBER_CHECK(params_.size() == 4, Error, "MultiHeadAttention: build() and bind() first (Model::build does)");
  EMBER_CHECK(x.rank() == 3 && x.shape().without_batch() == in_ && x.dtype() == DType::F32, ShapeError,
              "MultiHeadAttention: expects f32 input (N, " + in_.str().substr(1) + ", given " + x.str());
  const int64_t n = x.dim(0), t = in_[0];
  const Tensor& xr = as_layout(x, Layout::RowMajor, x_copy_);
  const Tensor& qkv = detail::dense_forward(state_, xr.reshape(Shape{n * t, in_[1]}), params_[0], params_[1], false);
  const detail::AttentionShape g{
      .n = n, .t = t, .heads = heads_, .key_dim = key_dim_, .value_dim = options_.value_dim, .causal = options_.causal};
  const bool drop = training && options_.dropout > 0.0f;
  EMBER_CHECK(!drop || state_tensors_.size() == 1, Error, "MultiHeadAttention: bind_state() first (Model::build does)");
  detail::AttentionDropoutStep step;
  if (drop) step = {.params = dropout_, .counter = &state_tensors_.at(0)};
  const Tensor& a = detail::attention_forward(attention_state_, g, qkv, drop ? &step : nullptr);
  y_ = detail::dense_forward(output_state_, a, params_[2], params_[3], false).reshape(Shape{n, t, out_dim_});
  return y_;
}

const Tensor& MultiHeadAttention::do_backward(const Tensor& dy) {
  const int64_t rows = dy.numel() / out_dim_;
  const Tensor* da = detail::dense_backward(output_state_, params_[2], dy.reshape(Shape{rows, out_dim_}), false, true,
                                            grads_.at(2), grads_.at(3));
  const Tensor& dqkv = detail::attention_backward(attention_state_, *da);
  const Tensor* dx =
      detail::dense_backward(state_, params_[0], dqkv, false, needs_input_grad(), grads_.at(0), grads_.at(1));
  if (!dx) return no_input_grad();
  dx_ = dx->reshape(Shape{dy.dim(0), in_[0], in_[1]});
  return dx_;
}

void MultiHeadAttention::do_release_buffers() {
  attention_state_.reset();
  output_state_.reset();
  x_copy_ = y_ = dx_ = Tensor();
  Layer::do_release_buffers();
}

std::string MultiHeadAttention::kernel_info(int64_t, Device device) const {
  return device.is_cuda() ? "cuBLAS projections, strided-batched attention per sample"
                          : "oneDNN sgemm projections, ember cpu attention per (sample, head)";
}

LayerConfig MultiHeadAttention::config() const {
  return {{"num_heads", config_value(heads_)},
          {"key_dim", config_value(key_dim_)},
          {"value_dim", config_value(options_.value_dim)},
          {"causal", config_value(options_.causal)},
          {"output_dim", config_value(options_.output_dim)},
          {"init_stddev", config_value(options_.init_stddev)},
          {"output_init_stddev", config_value(options_.output_init_stddev)},
          {"dropout", config_value(options_.dropout)}};
}

}  // namespace ember
