/// @file
/// Metrics: the epoch's running sums kept on the device, and the metric objects a model is
/// compiled with (Model::compile(optimizer, loss, metrics)). A metric is a per-sample value
/// averaged over the epoch's samples, as the loss: Keras' names.
///
/// @code{.unparsed}
///   metrics::SparseCategoricalAccuracy ("accuracy")        logits (K,), labels i32
///   metrics::SparseTopKCategoricalAccuracy(k)              the label among the k largest logits
///   metrics::CategoricalAccuracy                           argmax of logits == argmax of targets
///   metrics::BinaryAccuracy(threshold, from_logits)        per element: (output > threshold) == target
///   metrics::MeanAbsoluteError ("mae"), MeanSquaredError ("mse")
/// @endcode
///
/// A metric of your own subclasses Metric: accumulate() adds the batch's sum of per-sample values
/// to one slot of the sums (on the CPU: sums.buffer().data<double>()[slot] += ...).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../core/tensor.h"
#include "losses_kinds.h"

namespace ember {

class Loss;

/// Running sums of an epoch's loss and metrics, kept on the device of the outputs. On a GPU a
/// training step then never waits for the device: the sums are read back only when something is
/// printed (read() synchronises). f64 slots: [0] the loss sum, [1] the correct count that
/// SparseCategoricalCrossentropy fuses into its pass, [2] its invalid-label flag, [3] the batches
/// added while the loss sum stayed finite, [4 + i] metric i's sum. A model of several outputs
/// keeps one such block per output (its loss and metrics add to block(k)); read() then weighs
/// their losses into one loss sum.
class MetricSums {
 public:
  /// One block of kSlots + `metrics` slots on `device`, zeroed.
  explicit MetricSums(Device device = current_device(), int64_t metrics = 0);
  /// A block of kSlots + metrics[k] slots per output, output k's loss weighted by weights[k].
  MetricSums(Device device, const std::vector<int64_t>& metrics, std::vector<double> weights);
  void reset();  ///< zero
  /// The sums read back to the host (read()).
  struct Values {
    double loss_sum = 0;  ///< slot 0: the sum of the per-sample losses
    int64_t correct = 0;  ///< slot 1: the correct count the loss fused into its pass
    /// Batches added while the loss sum stayed finite: when it is not finite (a NaN or inf loss
    /// poisons the sum for good), the first bad batch is this one (0-based).
    int64_t finite_batches = 0;
    std::vector<double> metrics;  ///< slot 4 + i
    /// With several blocks: each block's values; loss_sum is then their weighted sum,
    /// finite_batches their least, and correct and metrics are empty (read them per block).
    std::vector<Values> outputs;
    bool finite() const;  ///< Whether loss_sum is finite (no NaN or inf loss was added).
  };
  /// The sums since the last reset. Throws ArgumentError when a GPU kernel met a label outside
  /// [0, classes) since then (the CPU path throws at once, in forward()).
  Values read() const;
  Device device() const { return buf_.device(); }  ///< Where the sums are kept.
  /// Blocks (1 unless made for several outputs), and block k's sums (a view of this buffer).
  size_t blocks() const { return blocks_.empty() ? 1 : blocks_.size(); }
  MetricSums& block(size_t k);  ///< Block `k` (ArgumentError when out of range; itself with one block).
  int64_t metrics() const { return buf_.numel() - kSlots; }  ///< The metric slots after the first kSlots.
  /// f64 (kSlots + metrics()), as above.
  Tensor& buffer() { return buf_; }
  /// A loss computed on the host (a user's CPU loss): slot 0 += loss_sum, slot 3 counted.
  /// ArgumentError on a GPU (add there with a kernel of your own).
  void add_loss(double loss_sum);
  static constexpr int64_t kSlots = 4;  ///< the slots before the metrics' (loss, correct, flag, batches)

 private:
  Tensor buf_;
  explicit MetricSums(Tensor view) : buf_(std::move(view)) {}  // a block
  std::vector<MetricSums> blocks_;                             // views of buf_, when several
  std::vector<double> weights_;
  static Values parse(const double* slots, int64_t n, const Device& device);
};

/// Rows of `logits` (N, K) whose argmax equals the label (i32, N); the first maximum wins on
/// ties. Synchronises with a GPU.
int64_t count_correct(const Tensor& logits, const Tensor& labels);

/// A metric: a per-sample value averaged over the epoch's samples (see metrics.h).
class Metric {
 public:
  virtual ~Metric() = default;
  virtual std::string name() const = 0;  ///< the history's and progress bar's key
  /// ShapeError naming both unless the metric fits outputs of per-sample shape `output` and
  /// targets of `target` dtype and per-sample shape `target_sample`.
  virtual void check(const Shape& output, DType target, const Shape& target_sample) const = 0;
  /// sums.buffer()[slot] += the batch's sum of per-sample values, on the outputs' device.
  virtual void accumulate(const Tensor& outputs, const Tensor& targets, MetricSums& sums, int64_t slot) const = 0;
  /// True when `loss` counts this metric in its own pass (MetricSums' slot 1): then it is read
  /// from there and accumulate() is not called.
  virtual bool fused_with(const Loss& loss) const;
  /// True when the metric must see the model's output (a final Softmax's probabilities) rather
  /// than the logits the loss read: every metric but those that rank a row's values (accuracy,
  /// top-k), which the Softmax cannot change.
  virtual bool reads_model_output() const { return true; }
};

/// The built-in metrics (Keras' names and semantics).
namespace metrics {

/// A metric computed by one of the library's kernels (CPU and GPU).
class BuiltinMetric : public Metric {
 public:
  std::string name() const override { return name_; }
  void check(const Shape& output, DType target, const Shape& target_sample) const override;
  void accumulate(const Tensor& outputs, const Tensor& targets, MetricSums& sums, int64_t slot) const override;
  bool reads_model_output() const override;

 protected:
  /// The kernel `kind` with its parameter (top-k's k, BinaryAccuracy's threshold), named `name`.
  BuiltinMetric(std::string name, detail::MetricKind kind, float param)
      : name_(std::move(name)), kind_(kind), param_(param) {}

 private:
  std::string name_;
  detail::MetricKind kind_;
  float param_;
};

/// Keras' SparseCategoricalAccuracy: whether the argmax of a row's logits is its i32 label (the
/// first maximum wins on ties).
class SparseCategoricalAccuracy : public BuiltinMetric {
 public:
  /// A metric named `name` (the history's key).
  explicit SparseCategoricalAccuracy(std::string name = "accuracy")
      : BuiltinMetric(std::move(name), detail::MetricKind::SparseAccuracy, 0.0f) {}
  bool fused_with(const Loss& loss) const override;
};

/// Keras' SparseTopKCategoricalAccuracy: whether the label is among the k largest logits (fewer
/// than k logits are greater than the label's; ties count in, as TensorFlow's in_top_k).
class SparseTopKCategoricalAccuracy : public BuiltinMetric {
 public:
  /// k >= 1 (ArgumentError else); named "sparse_top_k_categorical_accuracy" for k = 5, else
  /// "topK_accuracy" with K the number ("top3_accuracy").
  explicit SparseTopKCategoricalAccuracy(int k = 5);
};

/// Keras' CategoricalAccuracy: whether the argmax of the logits is the argmax of the f32 (N, K)
/// targets.
class CategoricalAccuracy : public BuiltinMetric {
 public:
  CategoricalAccuracy() : BuiltinMetric("categorical_accuracy", detail::MetricKind::CategoricalAccuracy, 0.0f) {}
};

/// Keras' BinaryAccuracy: an element is right when (output > threshold) equals its target. From
/// logits (the default, as losses::BinaryCrossentropy), `threshold` is on the probability
/// sigmoid(z): z > log(threshold / (1 - threshold)).
class BinaryAccuracy : public BuiltinMetric {
 public:
  /// threshold in (0, 1) (ArgumentError else), on the probability; the outputs are logits when
  /// `from_logits`, else probabilities.
  explicit BinaryAccuracy(float threshold = 0.5f, bool from_logits = true);
};

/// "mae": the mean over a sample's elements of |output - target|.
class MeanAbsoluteError : public BuiltinMetric {
 public:
  MeanAbsoluteError() : BuiltinMetric("mae", detail::MetricKind::AbsoluteError, 0.0f) {}
};

/// "mse": the mean over a sample's elements of (output - target)^2.
class MeanSquaredError : public BuiltinMetric {
 public:
  MeanSquaredError() : BuiltinMetric("mse", detail::MetricKind::SquaredError, 0.0f) {}
};

}  // namespace metrics

/// What Model::compile takes: shared, since metrics keep no state (every replica reads them).
using MetricList = std::vector<std::shared_ptr<const Metric>>;

}  // namespace ember
