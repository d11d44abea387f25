/// @file
/// Dataset: inputs and targets kept in memory as they came (u8 images stay u8: MNIST's 60,000
/// take 47 MB, not 188) and turned into batches on the fly.
///
/// @code{.unparsed}
///   features  u8 or f32 (N, ...)    a batch's x is f32 (B, ...) = features * scale()
///             i32 (N, ...)          token ids: a batch's x is i32 (B, ...), the ids as they are
///                                   (the scale must be 1)
///   targets   i32 (N, ...) labels (one per sample, or one per step: (N, T)), or f32 (N, ...)
///             values (regression, one-hot, multi-label, x itself)
/// @endcode
///
/// A model of several inputs (layers/model/graph.h) takes a dataset of several feature tensors
/// (from_inputs), each with its own scale and, optionally, the name of the model Input it feeds
/// (Keras' dict of inputs): named inputs are matched to the model's by name, unnamed ones by
/// position. A model of several outputs takes several target tensors alike (DataTarget, named
/// after the output layers or by position).
///
/// The scale is the one transform, and explicit: images of bytes come with 1/255 (the image
/// constructor and the MNIST loader say so), anything else with 1 unless given.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "../core/tensor.h"

namespace ember {

/// A dataset's scale, label range and name (Dataset::from_tensors and the like).
struct DatasetOptions {
  float scale = 1.0f;   ///< x = features * scale (u8 images: 1 / 255)
  int num_classes = 0;  ///< i32 labels: checked to lie in [0, num_classes) when > 0
  std::string name{};   ///< the dataset's name (for messages)
};

/// One input tensor of a dataset: u8 or f32 (N, ...), scaled by `scale` into an f32 batch, or i32
/// (N, ...) ids, copied as they are into an i32 batch; feeding the model Input called `name` ("":
/// by position).
struct DataInput {
  std::string name{};  ///< the model Input it feeds ("": by position)
  Tensor values{};     ///< u8, f32 or i32 (N, ...)
  float scale = 1.0f;  ///< the batch's x = values * scale (1 for i32 ids)
  /// The dtype of a batch's x from these values: i32 for i32 ids, f32 otherwise.
  DType batch_dtype() const { return values.dtype() == DType::I32 ? DType::I32 : DType::F32; }
};

/// One target tensor of a dataset: i32 (N, ...) labels or f32 (N, ...) values, for the model
/// output (its layer) called `name` ("": by position).
struct DataTarget {
  std::string name{};  ///< the output (its layer) it is for ("": by position)
  Tensor values{};     ///< i32 (N, ...) labels or f32 (N, ...) values
};

/// Inputs and targets kept in memory, turned into batches on the fly (see dataset.h).
class Dataset {
 public:
  /// An empty dataset (no samples).
  Dataset() = default;
  /// images: u8 (N, C, H, W) scaled by 1/255; labels: i32 (N) in [0, num_classes). ShapeError
  /// when they do not match, ArgumentError for a label out of range.
  Dataset(Tensor images, Tensor labels, int num_classes, std::string name = "");
  /// Any features (u8, f32 or i32 (N, ...); i32 with scale 1) and targets (i32 (N, ...) labels or
  /// f32 (N, ...); f32 (N) is taken as (N, 1)), on the CPU. num_classes checks every i32 label.
  static Dataset from_tensors(Tensor features, Tensor targets, DatasetOptions options = {});
  /// Several inputs (a model of several Inputs), all named or none, each with its own scale
  /// (options.scale must stay 1); the same N samples in each and in the targets.
  static Dataset from_inputs(std::vector<DataInput> inputs, Tensor targets, DatasetOptions options = {});
  /// Several targets (a model of several outputs), all named or none; num_classes checks every
  /// i32 target.
  static Dataset from_inputs(std::vector<DataInput> inputs, std::vector<DataTarget> targets,
                             DatasetOptions options = {});
  /// From vectors: `features` holds N samples of `sample` (row-major), `targets` N of `target`
  /// (Shape{} for one value per sample). ShapeError names what does not divide.
  static Dataset from_vectors(std::span<const float> features, const Shape& sample, std::span<const float> targets,
                              const Shape& target, DatasetOptions options = {});
  /// From vectors: `features` holds N samples of `sample` (row-major), `labels` one i32 label per
  /// sample. ShapeError names what does not divide or match.
  static Dataset from_vectors(std::span<const float> features, const Shape& sample, std::span<const int32_t> labels,
                              DatasetOptions options = {});

  /// N: the number of samples.
  int64_t size() const { return targets_.empty() ? 0 : targets_[0].values.dim(0); }
  /// Input 0's per-sample shape (the only input's, usually).
  Shape sample_shape() const { return inputs_.empty() ? Shape{} : inputs_[0].values.shape().without_batch(); }
  /// Target 0's (the only one's, usually): Shape{} for labels.
  Shape target_shape() const { return targets().shape().without_batch(); }
  DType target_dtype() const { return targets().dtype(); }                   ///< Target 0's dtype.
  float scale() const { return inputs_.empty() ? 1.0f : inputs_[0].scale; }  ///< Input 0's scale.
  int num_classes() const { return num_classes_; }                           ///< The label range checked (0: none).
  const std::string& name() const { return name_; }                          ///< The dataset's name.
  const Tensor& features() const { return input(0).values; }                 ///< input 0's
  const Tensor& targets() const { return target(0).values; }                 ///< target 0's
  /// The names of an image dataset's two tensors.
  ///@{
  const Tensor& images() const { return features(); }
  const Tensor& labels() const { return targets(); }
  ///@}
  /// The inputs, in the order a batch holds them.
  size_t num_inputs() const { return inputs_.size(); }
  const DataInput& input(size_t k) const;                           ///< Input `k` (ArgumentError when out of range).
  const std::vector<DataInput>& inputs() const { return inputs_; }  ///< Every input.
  /// The targets, in the order a batch holds them.
  size_t num_targets() const { return targets_.size(); }
  const DataTarget& target(size_t k) const;  ///< Target `k` (ArgumentError when out of range).
  const std::vector<DataTarget>& all_targets() const { return targets_; }  ///< Every target.
  /// The same samples with the inputs in the order of `inputs` (a model's Input names) and the
  /// targets in the order of `outputs` (its output names): named ones by name, unnamed ones as they
  /// are. ShapeError naming what is missing or left over (`what`: "fit", "evaluate" ...). A view,
  /// no copy.
  Dataset arranged_for(const std::vector<std::string>& inputs, const std::vector<std::string>& outputs,
                       const char* what) const;

  /// The first n samples (a view, no copy), e.g. for quick runs and tests.
  Dataset take(int64_t n) const;
  /// Samples [begin, end) (a view, no copy).
  Dataset slice(int64_t begin, int64_t end) const;
  /// A seeded shuffle split into (1 - fraction, fraction) of the samples (copies): a held-out set
  /// drawn at random. fraction in (0, 1); both parts non-empty.
  std::pair<Dataset, Dataset> split(double fraction, uint64_t seed) const;

  /// Gathers `indices` into x (f32 (B, ...) row-major, features * scale; i32 ids as they are) and
  /// y (targets' dtype, (B, ...)). Reuses x and y when their shapes already fit. One input.
  void gather(std::span<const int64_t> indices, Tensor& x, Tensor& y) const;
  /// Any number of inputs and targets: xs[k] from input k, ys[k] from target k (resized to
  /// num_inputs() and num_targets()).
  void gather(std::span<const int64_t> indices, std::vector<Tensor>& xs, std::vector<Tensor>& ys) const;

 private:
  std::vector<DataInput> inputs_;
  std::vector<DataTarget> targets_;
  int num_classes_ = 0;
  std::string name_;
};

}  // namespace ember
