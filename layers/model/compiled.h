// What compile() gives each output of a model (Keras' compiled losses and metrics): its loss, a
// clone of it for evaluation, its weight in the model's loss and its metrics. Says what the history
// logs (names, sums), checks targets against them, and per batch computes the losses, their
// gradients (the backward pass's seeds) and the metrics; it runs no layer but a final Softmax for
// the metrics. Knows loss.h and metrics.h, and the layers, shapes and names it is given; Model owns
// one.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "../../core/tensor.h"
#include "../layer.h"
#include "../loss.h"
#include "../metrics.h"

namespace ember::detail {

class CompiledOutputs {
 public:
  /// One output's: the loss for training and a clone for evaluation (each keeps its own buffers,
  /// so a captured training step's stay put), its weight and metrics.
  struct Head {
    std::unique_ptr<Loss> loss = std::make_unique<losses::SparseCategoricalCrossentropy>();
    std::unique_ptr<Loss> eval_loss = std::make_unique<losses::SparseCategoricalCrossentropy>();
    double weight = 1.0;
    MetricList metrics{std::make_shared<metrics::SparseCategoricalAccuracy>()};
    Tensor scaled;  // weight * the loss's gradient (weight != 1)
  };
  /// Output k's head from compile()'s arguments. ArgumentError for a null loss, a weight that is
  /// not finite and >= 0, a null or twice-named metric, a loss that takes softmax logits on an
  /// output that is a Softmax (`softmax_output`) of a model of several (`outputs`), a null clone.
  static Head make_head(std::unique_ptr<Loss> loss, double weight, MetricList metrics, size_t k, size_t outputs,
                        bool softmax_output);
  void set(std::vector<Head> heads) { heads_ = std::move(heads); }
  size_t size() const { return heads_.size(); }
  Head& at(size_t k) { return heads_.at(k); }
  const Head& at(size_t k) const { return heads_.at(k); }
  /// Error unless there is a head per output of a model of `outputs` outputs ("Model::<what>: ...").
  void require(size_t outputs, const char* what) const;

  /// The metrics' names (one output), else each output's loss then each output's metrics,
  /// prefixed with `output_names`.
  std::vector<std::string> metric_names(const std::vector<std::string>& output_names) const;
  MetricSums make_sums(Device device) const;  ///< a slot per metric, a block per output
  /// What metric_names() names, as sums, from `values` (see Model::metric_sums); `shapes`: the
  /// outputs' per-sample shapes (a sequence's fused count is per step: divided by its steps).
  std::vector<double> metric_sums(const MetricSums::Values& values, const std::vector<Shape>& shapes) const;
  /// ShapeError (prefixed with `what`, and `output_name` with several outputs) unless output k's
  /// loss and metrics fit targets of `target` dtype and per-sample shape; `shape`: the output's.
  void check_targets(const Shape& shape, DType target, const Shape& target_sample, const char* what, size_t k,
                     const std::string& output_name) const;
  /// A batch of n rows about to run in slices: ShapeError unless output k's target t is (n, ...)
  /// row-major on the CPU and fits its loss (`shape`: the output's per-sample shape), so a bad one
  /// throws before any slice has added to the sums or the gradients.
  void check_sliced_target(const Tensor& t, int64_t n, size_t k, const Shape& shape) const;

  /// Training: each output's loss on `outs` (Executor::loss_inputs) against targets ys, added to
  /// `sums`, and its metrics; returns d(model's loss)/d(output k) for each (the mean over mean_rows
  /// rows; 0: the batch's). `softmax`: the model's final Softmax when the loss reads its input (the
  /// metrics see its output), else null.
  std::span<const Tensor* const> losses(std::span<const Tensor* const> outs, std::span<const Tensor> ys,
                                        MetricSums& sums, int64_t mean_rows, Layer* softmax);
  /// Inference: the evaluation losses and the metrics. Returns the final Softmax's output when one
  /// was run for the metrics (the caller holds it), else null.
  const Tensor* evaluate(std::span<const Tensor* const> outs, std::span<const Tensor> ys, MetricSums& sums,
                         Layer* softmax);

 private:
  void check_batch(std::span<const Tensor* const> outs, std::span<const Tensor> ys, const MetricSums& sums,
                   const char* what) const;
  const Tensor* metrics(size_t k, const Tensor& outputs, const Tensor& targets, MetricSums& sums, Layer* softmax);

  std::vector<Head> heads_ = std::vector<Head>(1);
  std::vector<const Tensor*> seeds_;  // losses()' gradients
};

}  // namespace ember::detail
