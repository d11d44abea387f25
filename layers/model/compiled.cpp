// A model's compiled losses and metrics (see compiled.h).
#include "compiled.h"

#include <algorithm>
#include <cmath>

#include "../../core/error.h"
#include "../ops/elementwise.h"

namespace ember::detail {

CompiledOutputs::Head CompiledOutputs::make_head(std::unique_ptr<Loss> loss, double weight, MetricList metrics,
                                                 size_t k, size_t outputs, bool softmax_output) {
  const std::string which = outputs == 1 ? std::string() : " (output " + std::to_string(k) + ")";
  EMBER_CHECK(loss != nullptr, ArgumentError, "Model::compile: null loss" + which);
  EMBER_CHECK(std::isfinite(weight) && weight >= 0, ArgumentError,
              "Model::compile: a loss weight must be finite and >= 0, got " + std::to_string(weight) + which);
  for (size_t i = 0; i < metrics.size(); ++i) {
    EMBER_CHECK(metrics[i] != nullptr, ArgumentError,
                "Model::compile: metric " + std::to_string(i) + " is null" + which);
    for (size_t j = 0; j < i; ++j)
      EMBER_CHECK(metrics[j]->name() != metrics[i]->name(), ArgumentError,
                  "Model::compile: two metrics are named '" + metrics[i]->name() + "'" + which);
  }
  EMBER_CHECK(!(outputs > 1 && softmax_output && loss->takes_softmax_logits()), ArgumentError,
              "Model::compile: output " + std::to_string(k) + " is a Softmax and its loss " + loss->name() +
                  " takes logits: with several outputs, end that output in its logits (the loss applies the softmax)");
  Head h;
  h.eval_loss = loss->clone();
  EMBER_CHECK(h.eval_loss != nullptr, ArgumentError, "Model::compile: the loss's clone() returned null" + which);
  h.loss = std::move(loss);
  h.weight = weight;
  h.metrics = std::move(metrics);
  return h;
}

void CompiledOutputs::require(size_t outputs, const char* what) const {
  EMBER_CHECK(heads_.size() == std::max<size_t>(outputs, 1), Error,
              std::string("Model::") + what + ": compile() a model of " + std::to_string(outputs) +
                  " outputs with a loss per output (OutputLoss) first");
}

std::vector<std::string> CompiledOutputs::metric_names(const std::vector<std::string>& output_names) const {
  std::vector<std::string> names;
  if (heads_.size() == 1) {
    for (const auto& m : heads_[0].metrics) names.push_back(m->name());
    return names;
  }
  // Keras: every output's loss, then the metrics.
  for (size_t k = 0; k < heads_.size(); ++k) names.push_back(output_names[k] + "_loss");
  for (size_t k = 0; k < heads_.size(); ++k)
    for (const auto& m : heads_[k].metrics) names.push_back(output_names[k] + "_" + m->name());
  return names;
}

MetricSums CompiledOutputs::make_sums(Device device) const {
  if (heads_.size() == 1 && heads_[0].weight == 1.0)
    return MetricSums(device, static_cast<int64_t>(heads_[0].metrics.size()));
  std::vector<int64_t> counts;
  std::vector<double> weights;
  for (const Head& h : heads_) {
    counts.push_back(static_cast<int64_t>(h.metrics.size()));
    weights.push_back(h.weight);
  }
  return MetricSums(device, counts, weights);
}

std::vector<double> CompiledOutputs::metric_sums(const MetricSums::Values& v, const std::vector<Shape>& shapes) const {
  // One head's metrics from its block: each from its slot, or the loss's fused count (per step of
  // a (time, classes) output: the sample's share is its steps' mean).
  const auto of = [&](size_t k, const MetricSums::Values& b, std::vector<double>& out) {
    const Head& h = heads_[k];
    const Shape* s = k < shapes.size() ? &shapes[k] : nullptr;
    const double steps = s && s->rank() == 2 ? static_cast<double>((*s)[0]) : 1.0;
    for (size_t i = 0; i < h.metrics.size(); ++i)
      out.push_back(h.metrics[i]->fused_with(*h.loss) ? static_cast<double>(b.correct) / steps
                                                      : (i < b.metrics.size() ? b.metrics[i] : 0.0));
  };
  std::vector<double> out;
  if (heads_.size() == 1) {
    of(0, v, out);
    return out;
  }
  if (v.outputs.size() != heads_.size()) return v.metrics;  // a reduced list, in metric_names()' order
  for (const MetricSums::Values& b : v.outputs) out.push_back(b.loss_sum);
  for (size_t k = 0; k < heads_.size(); ++k) of(k, v.outputs[k], out);
  return out;
}

void CompiledOutputs::check_targets(const Shape& shape, DType target, const Shape& target_sample, const char* what,
                                    size_t k, const std::string& output_name) const {
  const Head& h = heads_.at(k);
  try {
    h.loss->check(shape, target, target_sample);
    for (const auto& m : h.metrics) m->check(shape, target, target_sample);
  } catch (const ShapeError& e) {
    throw ShapeError(std::string(what) + ": " +
                     (heads_.size() == 1 ? std::string() : "output '" + output_name + "': ") + e.what());
  }
}

void CompiledOutputs::check_sliced_target(const Tensor& t, int64_t n, size_t k, const Shape& shape) const {
  EMBER_CHECK(t.rank() >= 1 && t.dim(0) == n && t.layout() == Layout::RowMajor && t.device().is_cpu(), ShapeError,
              "Model: targets must be (" + std::to_string(n) + ", ...) on the cpu for this batch, got " + t.str());
  heads_[k].loss->check_targets(t, shape);
}

void CompiledOutputs::check_batch(std::span<const Tensor* const> outs, std::span<const Tensor> ys,
                                  const MetricSums& sums, const char* what) const {
  require(outs.size(), what);
  EMBER_CHECK(
      ys.size() == heads_.size(), ArgumentError,
      "Model: " + std::to_string(ys.size()) + " targets for a model of " + std::to_string(heads_.size()) + " outputs");
  EMBER_CHECK(sums.blocks() == heads_.size(), ArgumentError,
              "Model: the metric sums hold " + std::to_string(sums.blocks()) + " outputs' sums; the model has " +
                  std::to_string(heads_.size()) + " (make them with make_sums())");
}

// Metrics see what the model outputs (Keras' y_pred): when the loss read a final Softmax's input,
// that Softmax runs here for them (forward only; its backward never runs in training).
const Tensor* CompiledOutputs::metrics(size_t k, const Tensor& outputs, const Tensor& targets, MetricSums& sums,
                                       Layer* softmax) {
  const Head& h = heads_[k];
  const Tensor* y = &outputs;
  for (size_t i = 0; i < h.metrics.size(); ++i) {
    if (h.metrics[i]->fused_with(*h.loss)) continue;
    if (y == &outputs && softmax != nullptr && h.metrics[i]->reads_model_output())
      y = &softmax->forward(outputs, false);
    const Tensor& seen = h.metrics[i]->reads_model_output() ? *y : outputs;
    const int64_t slot = MetricSums::kSlots + static_cast<int64_t>(i);
    EMBER_CHECK(sums.blocks() == heads_.size() && slot < sums.block(k).buffer().numel(), ArgumentError,
                "Model: the metric sums do not fit the compiled losses and metrics (make them with make_sums())");
    h.metrics[i]->accumulate(seen, targets, sums.block(k), slot);
  }
  return y != &outputs ? y : nullptr;
}

std::span<const Tensor* const> CompiledOutputs::losses(std::span<const Tensor* const> outs, std::span<const Tensor> ys,
                                                       MetricSums& sums, int64_t mean_rows, Layer* softmax) {
  check_batch(outs, ys, sums, "compute_gradients");
  seeds_.assign(heads_.size(), nullptr);
  for (size_t k = 0; k < heads_.size(); ++k) {
    Head& h = heads_[k];
    // Metrics read the outputs only, never the loss's buffers: after the loss's backward is as good.
    const Tensor& d = h.loss->forward_backward(*outs[k], ys[k], sums.block(k), mean_rows);
    metrics(k, *outs[k], ys[k], sums, softmax);
    if (h.weight == 1.0) {
      seeds_[k] = &d;
    } else {
      ensure(h.scaled, d.shape(), DType::F32, d.device(), d.layout());
      detail::elementwise_scale(static_cast<float>(h.weight), d, h.scaled);
      seeds_[k] = &h.scaled;
    }
  }
  return seeds_;
}

const Tensor* CompiledOutputs::evaluate(std::span<const Tensor* const> outs, std::span<const Tensor> ys,
                                        MetricSums& sums, Layer* softmax) {
  check_batch(outs, ys, sums, "evaluate_batch");
  const Tensor* ran = nullptr;
  for (size_t k = 0; k < heads_.size(); ++k) {
    heads_[k].eval_loss->forward(*outs[k], ys[k], sums.block(k));
    if (const Tensor* y = metrics(k, *outs[k], ys[k], sums, softmax)) ran = y;
  }
  return ran;
}

}  // namespace ember::detail
