/// @file
/// Embedding(input_dim, output_dim, init_stddev = 0): Keras' layer. Takes i32 ids of any per-sample
/// shape, (time,) for a sequence, and gives each its row of a trained table (input_dim, output_dim):
/// (N, T) -> (N, T, output_dim). An id outside [0, input_dim) is an ArgumentError naming it and its
/// position (on a GPU the forward waits for the device to say whether there is one; inside a
/// captured CUDA graph it cannot wait, and such an id gives a row of zeros).
///
/// The table starts as Keras' U(-0.05, 0.05), or normal(0, init_stddev) when init_stddev > 0
/// (GPT-2's 0.02). Its gradient scatter-adds the output gradient by id, each row summed in the
/// batch's sum order (core/pairwise_sum.h): deterministic on either backend, and a sliced batch's
/// gradients add up to the whole batch's. The ids have no gradient: an Embedding reads a model
/// input.
///
/// PositionEmbedding(sequence_length, init_stddev = 0): learned positions added to a sequence, as
/// the position half of Keras-NLP's TokenAndPositionEmbedding (GPT-2's wpe). On input (N, T, C),
/// T <= sequence_length, it gives x + P[t] at step t, P a trained table (sequence_length, C); the
/// input gradient is the output gradient. The table's initialisers and gradient are Embedding's
/// (rows past T get zero gradient).
#pragma once

#include "layer.h"

namespace ember {

/// A table lookup of i32 ids, Keras' semantics (see embedding.h).
class Embedding : public Layer {
 public:
  /// input_dim >= 1 ids, output_dim >= 1 features, init_stddev >= 0 (ArgumentError else).
  Embedding(int64_t input_dim, int64_t output_dim, float init_stddev = 0.0f);
  std::string type() const override { return "Embedding"; }
  bool takes_ids() const override { return true; }
  bool rows_independent(bool /*training*/) const override { return true; }
  Shape build(const Shape& sample_shape) override;
  std::vector<ParamSpec> param_specs() const override;
  std::string kernel_info(int64_t, Device device) const override;
  LayerConfig config() const override;
  int64_t input_dim() const { return input_dim_; }    ///< The vocabulary: ids in [0, input_dim).
  int64_t output_dim() const { return output_dim_; }  ///< The features of each id's row.

 protected:
  const Tensor& do_forward(const Tensor& x, bool training) override;
  const Tensor& do_backward(const Tensor& dy) override;

 private:
  int64_t input_dim_, output_dim_;
  float init_stddev_;
  Shape in_;
};

/// Learned position embeddings added to a sequence (see embedding.h).
class PositionEmbedding : public Layer {
 public:
  /// sequence_length >= 1 positions, init_stddev >= 0 (ArgumentError else).
  explicit PositionEmbedding(int64_t sequence_length, float init_stddev = 0.0f);
  std::string type() const override { return "PositionEmbedding"; }
  bool rows_independent(bool /*training*/) const override { return true; }
  Shape build(const Shape& sample_shape) override;
  std::vector<ParamSpec> param_specs() const override;
  std::string kernel_info(int64_t, Device device) const override;
  LayerConfig config() const override;
  int64_t sequence_length() const { return length_; }  ///< The longest sequence: the table's rows.

 protected:
  const Tensor& do_forward(const Tensor& x, bool training) override;
  const Tensor& do_backward(const Tensor& dy) override;
  void do_release_buffers() override;

 private:
  int64_t length_;
  float init_stddev_;
  Shape in_;
  Tensor positions_;  // i32 (N, T): t at every sample's step t, on the input's device
  Tensor x_copy_, y_, dy_copy_, dx_;
};

}  // namespace ember
