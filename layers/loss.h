/// @file
/// Losses: objects a model is compiled with (Model::compile(optimizer, loss, metrics)), Keras'
/// names, arguments and reduction: a sample's loss is its elements' mean (a categorical one: the
/// sum over its classes), the batch's the mean over its samples. Every built-in runs on the CPU
/// and on a GPU (the same formulas, layers/losses_math.h), adding its batch's loss sum to
/// MetricSums on the outputs' device (no host synchronisation).
///
/// @code{.unparsed}
///   losses::SparseCategoricalCrossentropy   logits (K,), labels i32        (the default)
///   losses::CategoricalCrossentropy(s)      logits (K,), f32 (K,) one-hot or soft, label smoothing s
///   losses::BinaryCrossentropy(logits, s)   f32 (...) in [0, 1] per output (multi-label); from logits
///                                           or from probabilities (clipped to [1e-7, 1 - 1e-7])
///   losses::MeanSquaredError / MeanAbsoluteError / Huber(delta)   f32 targets of the output's shape
/// @endcode
///
/// A loss of your own subclasses Loss (docs/usage.md shows one): check() the shapes, forward()
/// adds the batch's sum of per-sample losses to sums.buffer()'s slot 0 (and counts the finite
/// batches, MetricSums::add_loss does both on the CPU), backward() returns d(mean loss)/d(outputs);
/// training calls forward_backward(), forward() then backward() unless overridden to fuse both.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "../core/tensor.h"
#include "losses_kinds.h"
#include "metrics.h"

namespace ember {

/// A loss: what a model is compiled with and training minimises (see loss.h).
class Loss {
 public:
  virtual ~Loss() = default;
  /// Keras' name ("mean_squared_error"): the history and progress bar call it "loss".
  virtual std::string name() const = 0;
  /// A fresh loss of the same configuration (the model keeps one for training, one for evaluation,
  /// one per replica: each keeps its own buffers).
  virtual std::unique_ptr<Loss> clone() const = 0;
  /// ShapeError naming both unless outputs of per-sample shape `output` fit targets of `target`
  /// dtype and per-sample shape `target_sample` (Shape{} for a label per sample).
  virtual void check(const Shape& output, DType target, const Shape& target_sample) const = 0;
  /// A whole batch's targets on the CPU, checked before any of its slices adds to the sums or the
  /// gradients (SparseCategoricalCrossentropy: the labels' range). Nothing by default.
  virtual void check_targets(const Tensor& targets, const Shape& output) const;
  /// True when the loss takes logits of a softmax: a model ending in a Softmax layer then feeds it
  /// the Softmax's input (stable) and predict() still returns probabilities.
  virtual bool takes_softmax_logits() const { return false; }
  /// Adds the batch's sum of per-sample losses to `sums` (on the outputs' device) and keeps what
  /// backward() needs. outputs f32 (N, ...) row-major; targets (N, ...).
  virtual void forward(const Tensor& outputs, const Tensor& targets, MetricSums& sums) = 0;
  /// d(sum of the per-sample losses / mean_rows)/d(outputs) of the last forward, written (=);
  /// valid until the next forward. mean_rows: the whole batch's rows when the last forward was a
  /// slice of it; 0: the last forward's rows.
  virtual const Tensor& backward(int64_t mean_rows = 0) = 0;
  /// forward() then backward(mean_rows), what a training step runs: a loss may do both at once
  /// (SparseCategoricalCrossentropy on a GPU under set_fused_loss: one kernel, the same bits; a
  /// subclass of it that overrides forward() or backward() still gets them called). A loss of
  /// your own need not override it.
  virtual const Tensor& forward_backward(const Tensor& outputs, const Tensor& targets, MetricSums& sums,
                                         int64_t mean_rows = 0);
  /// The mean loss of one batch through sums of its own (synchronises with a GPU).
  float value(const Tensor& outputs, const Tensor& targets);

 protected:
  /// mean_rows as backward() reads it: 0 means the last forward's rows.
  static int64_t rows_for_mean(int64_t mean_rows, const Tensor& outputs);
  /// Sums of this loss's own on `device`, zeroed (value() and the like).
  MetricSums& scratch_sums(Device device);

 private:
  std::unique_ptr<MetricSums> own_sums_;
};

/// The built-in losses (Keras' names and semantics).
namespace losses {

/// Keras' SparseCategoricalCrossentropy(from_logits=True): logits (N, K), labels i32 (N) in
/// [0, K); or a sequence's logits (N, T, K) and labels (N, T), each sample's loss the mean over
/// its T steps (Keras' mean over every position). Also counts correct predictions (MetricSums'
/// fused slot, a sequence's per step: the "accuracy" metric reads it without another pass).
class SparseCategoricalCrossentropy : public Loss {
 public:
  std::string name() const override { return "sparse_categorical_crossentropy"; }
  std::unique_ptr<Loss> clone() const override { return std::make_unique<SparseCategoricalCrossentropy>(); }
  void check(const Shape& output, DType target, const Shape& target_sample) const override;
  void check_targets(const Tensor& targets, const Shape& output) const override;
  bool takes_softmax_logits() const override { return true; }
  using Loss::forward;
  void forward(const Tensor& logits, const Tensor& labels, MetricSums& sums) override;
  /// The batch's mean loss (and, when `correct` is given, its correct count). Synchronises.
  float forward(const Tensor& logits, const Tensor& labels, int64_t* correct = nullptr);
  const Tensor& backward(int64_t mean_rows = 0) override;
  const Tensor& forward_backward(const Tensor& logits, const Tensor& labels, MetricSums& sums,
                                 int64_t mean_rows = 0) override;
  /// Softmax probabilities of the last forward.
  const Tensor& probabilities() const { return probs_; }

 private:
  // Checks the sums' device, sizes probs_ and keeps the labels: what both forwards do first.
  void prepare(const Tensor& logits, const Tensor& labels, const MetricSums& sums);
  Tensor probs_, labels_, dlogits_;
  Tensor rows_, prob_rows_;  // the logits and probabilities as (N * T, K) rows
  int64_t samples_ = 0, positions_ = 1;
};

/// Keras' CategoricalCrossentropy(from_logits=True, label_smoothing): logits (N, K), targets f32
/// (N, K) (one-hot or any distribution), smoothed to t (1 - s) + s / K.
class CategoricalCrossentropy : public Loss {
 public:
  /// Label smoothing `label_smoothing` in [0, 1] (ArgumentError else).
  explicit CategoricalCrossentropy(float label_smoothing = 0.0f);
  std::string name() const override { return "categorical_crossentropy"; }
  std::unique_ptr<Loss> clone() const override { return std::make_unique<CategoricalCrossentropy>(smoothing_); }
  void check(const Shape& output, DType target, const Shape& target_sample) const override;
  bool takes_softmax_logits() const override { return true; }
  void forward(const Tensor& logits, const Tensor& targets, MetricSums& sums) override;
  const Tensor& backward(int64_t mean_rows = 0) override;

 private:
  float smoothing_;
  Tensor probs_, targets_, dlogits_;
};

/// Losses of one value per output element against f32 targets of the output's shape.
class PointwiseLoss : public Loss {
 public:
  void check(const Shape& output, DType target, const Shape& target_sample) const override;
  void forward(const Tensor& outputs, const Tensor& targets, MetricSums& sums) override;
  const Tensor& backward(int64_t mean_rows = 0) override;

 protected:
  /// The elementwise loss `kind`, with its parameter (Huber's delta, BinaryCrossentropy's label
  /// smoothing; 0 for the others).
  PointwiseLoss(detail::PointLoss kind, float param) : kind_(kind), param_(param) {}
  detail::PointLoss kind_;  ///< which formula
  float param_;             ///< its parameter (see the constructor)

 private:
  Tensor outputs_, targets_, grad_;
};

/// Keras' MeanSquaredError: mean over a sample's elements of (output - target)^2.
class MeanSquaredError : public PointwiseLoss {
 public:
  MeanSquaredError() : PointwiseLoss(detail::PointLoss::SquaredError, 0.0f) {}
  std::string name() const override { return "mean_squared_error"; }
  std::unique_ptr<Loss> clone() const override { return std::make_unique<MeanSquaredError>(); }
};

/// Keras' MeanAbsoluteError: mean over a sample's elements of |output - target|.
class MeanAbsoluteError : public PointwiseLoss {
 public:
  MeanAbsoluteError() : PointwiseLoss(detail::PointLoss::AbsoluteError, 0.0f) {}
  std::string name() const override { return "mean_absolute_error"; }
  std::unique_ptr<Loss> clone() const override { return std::make_unique<MeanAbsoluteError>(); }
};

/// 0.5 e^2 for |e| <= delta, delta (|e| - delta / 2) beyond (Keras' Huber, PyTorch's HuberLoss).
class Huber : public PointwiseLoss {
 public:
  /// delta > 0 (ArgumentError else).
  explicit Huber(float delta = 1.0f);
  std::string name() const override { return "huber_loss"; }
  std::unique_ptr<Loss> clone() const override { return std::make_unique<Huber>(param_); }
};

/// Keras' BinaryCrossentropy: an independent yes/no per output element (multi-label), targets in
/// [0, 1] smoothed to t (1 - s) + s / 2. from_logits (the default here, unlike Keras: the stable
/// form, and what a model without a final sigmoid outputs): max(z, 0) - z t + log(1 + e^-|z|).
/// Else the outputs are probabilities, clipped to [1e-7, 1 - 1e-7] as Keras does.
class BinaryCrossentropy : public PointwiseLoss {
 public:
  /// From logits (else probabilities), with label smoothing `label_smoothing` in [0, 1] (ArgumentError
  /// else).
  explicit BinaryCrossentropy(bool from_logits = true, float label_smoothing = 0.0f);
  std::string name() const override { return "binary_crossentropy"; }
  std::unique_ptr<Loss> clone() const override;
};

}  // namespace losses

/// The name the library had before losses were objects.
using SoftmaxCrossEntropy = losses::SparseCategoricalCrossentropy;

}  // namespace ember
