/// @file
/// MultiHeadAttention(num_heads, key_dim, options): Keras' layer as self-attention (query, key and
/// value all the layer's input), PyTorch's nn.MultiheadAttention with batch_first. On a per-sample
/// input (time, features) it projects each step to H heads' queries and keys (key_dim each) and
/// values (value_dim), attends per head with softmax(Q K^T / sqrt(key_dim)) V, under a causal mask
/// when `causal` (step i sees steps 0..i: a decoder's), and projects the heads' outputs back to
/// output_dim features (the input's by default): (time, features) -> (time, output_dim).
///
/// Parameters: `qkv_kernel` (H (2 key_dim + value_dim), features) and `qkv_bias`, the three
/// projections stacked as PyTorch's in_proj_weight (queries, then keys, then values, heads side by
/// side in each); `output_kernel` (output_dim, H value_dim) and `output_bias`. Kernels start
/// Glorot-uniform over each projection's matrix (or normal(0, init_stddev) / normal(0,
/// output_init_stddev), GPT-2's 0.02 and 0.02 / sqrt(2 layers)), biases zero. The projections are
/// Dense's kernels (their gradients in the batch's sum order); the attention runs one (sample,
/// head) at a time on the CPU with the probabilities kept for the backward, and as cuBLAS
/// strided-batched products on a GPU. Samples never mix: the batch may be sliced (outside training
/// with dropout).
///
/// `dropout` (Keras' argument): in training each attention probability is zeroed with that
/// probability and the rest scaled by 1 / (1 - dropout), after the softmax and before the values'
/// product; the masks are Dropout's (the model's seed, the layer's position, the replica and a
/// step counter kept in the model's state), the same on the CPU and a GPU. Evaluation and predict
/// never drop.
#pragma once

#include <memory>

#include "layer.h"
#include "random_bits.h"

namespace ember {

/// MultiHeadAttention's settings beyond the heads and key width (see attention.h).
struct AttentionOptions {
  int64_t value_dim = 0;            ///< each head's value width (0: key_dim)
  bool causal = false;              ///< step i attends to steps 0..i only
  int64_t output_dim = 0;           ///< the output's features (0: the input's)
  float init_stddev = 0.0f;         ///< > 0: the qkv kernel normal(0, this) instead of Glorot
  float output_init_stddev = 0.0f;  ///< > 0: the output kernel normal(0, this) instead of Glorot
  float dropout = 0.0f;             ///< the attention probabilities' dropout rate in training, in [0, 1)
};

/// Multi-head self-attention over (time, features) samples (see attention.h).
class MultiHeadAttention : public Layer {
 public:
  /// num_heads >= 1, key_dim >= 1, the options' sizes >= 0, deviations finite and >= 0, dropout
  /// in [0, 1) (ArgumentError else).
  MultiHeadAttention(int64_t num_heads, int64_t key_dim, AttentionOptions options = {});
  ~MultiHeadAttention() override;
  std::string type() const override { return "MultiHeadAttention"; }
  bool rows_independent(bool training) const override { return !training || options_.dropout == 0.0f; }
  Shape build(const Shape& sample_shape) override;
  std::vector<StateSpec> state_specs() const override;
  void set_random_seed(uint64_t seed) override { dropout_.seed = seed; }
  uint64_t random_seed() const override { return dropout_.seed; }
  std::vector<ParamSpec> param_specs() const override;
  std::string kernel_info(int64_t, Device device) const override;
  LayerConfig config() const override;
  int64_t num_heads() const { return heads_; }                  ///< H
  int64_t key_dim() const { return key_dim_; }                  ///< each head's query and key width
  const AttentionOptions& options() const { return options_; }  ///< the settings, value_dim resolved

 protected:
  const Tensor& do_forward(const Tensor& x, bool training) override;
  const Tensor& do_backward(const Tensor& dy) override;
  void do_release_buffers() override;

 private:
  int64_t heads_, key_dim_;
  AttentionOptions options_;
  detail::DropoutParams dropout_;  // the probabilities' dropout: seed, threshold, scale
  Shape in_;
  int64_t out_dim_ = 0;
  std::unique_ptr<detail::OpState> attention_state_, output_state_;  // state_ holds the qkv projection's
  Tensor x_copy_, y_, dx_;
};

}  // namespace ember
