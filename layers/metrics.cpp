// Metric sums and the built-in metrics.
#include "metrics.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../core/error.h"
#include "loss.h"
#include "ops/losses.h"
#include "ops/softmax_xent.h"

namespace ember {

MetricSums::MetricSums(Device device, int64_t metrics)
    : buf_(Tensor::zeros(Shape{kSlots + metrics}, DType::F64, device)) {}

MetricSums::MetricSums(Device device, const std::vector<int64_t>& metrics, std::vector<double> weights)
    : weights_(std::move(weights)) {
  EMBER_CHECK(
      !metrics.empty() && metrics.size() == weights_.size(), ArgumentError,
      "MetricSums: " + std::to_string(metrics.size()) + " blocks and " + std::to_string(weights_.size()) + " weights");
  int64_t total = 0;
  for (int64_t m : metrics) total += kSlots + m;
  buf_ = Tensor::zeros(Shape{total}, DType::F64, device);
  if (metrics.size() == 1) return;  // one block: the plain layout (read() still weighs its loss)
  int64_t at = 0;
  for (int64_t m : metrics) {
    blocks_.push_back(MetricSums(buf_.view(at, Shape{kSlots + m})));
    at += kSlots + m;
  }
}

MetricSums& MetricSums::block(size_t k) {
  EMBER_CHECK(k < blocks(), ArgumentError,
              "MetricSums::block(" + std::to_string(k) + ") of " + std::to_string(blocks()) + " blocks");
  return blocks_.empty() ? *this : blocks_[k];
}

void MetricSums::reset() { buf_.zero(); }  // on a GPU queued, no wait

MetricSums::Values MetricSums::parse(const double* slots, int64_t n, const Device& device) {
  EMBER_CHECK(slots[2] == 0.0, ArgumentError,
              "softmax cross-entropy (" + device.str() + "): a label was outside [0, classes)");
  return {slots[0],
          static_cast<int64_t>(slots[1]),
          static_cast<int64_t>(slots[3]),
          std::vector<double>(slots + kSlots, slots + n),
          {}};
}

MetricSums::Values MetricSums::read() const {
  std::vector<double> host(static_cast<size_t>(buf_.numel()));
  if (buf_.device().is_cpu()) {
    std::memcpy(host.data(), buf_.raw(), host.size() * sizeof(double));
  } else {
    Tensor t = buf_.to(Device::cpu());  // waits for the device's queued work
    std::memcpy(host.data(), t.raw(), host.size() * sizeof(double));
  }
  if (blocks_.empty()) {
    Values v = parse(host.data(), buf_.numel(), buf_.device());
    if (weights_.size() == 1) v.loss_sum *= weights_[0];  // one output of weight != 1
    return v;
  }
  Values v;
  int64_t at = 0;
  for (size_t k = 0; k < blocks_.size(); ++k) {
    const int64_t n = blocks_[k].buf_.numel();
    v.outputs.push_back(parse(host.data() + at, n, buf_.device()));
    at += n;
    v.loss_sum += weights_[k] * v.outputs.back().loss_sum;
    v.finite_batches =
        k == 0 ? v.outputs[0].finite_batches : std::min(v.finite_batches, v.outputs.back().finite_batches);
  }
  return v;
}

bool MetricSums::Values::finite() const { return std::isfinite(loss_sum); }

void MetricSums::add_loss(double loss_sum) {
  EMBER_CHECK(buf_.device().is_cpu(), ArgumentError,
              "MetricSums::add_loss: the sums are on " + buf_.device().str() +
                  "; a loss on a GPU adds to buffer() with a kernel of its own");
  double* acc = buf_.data<double>();
  acc[0] += loss_sum;
  if (std::isfinite(acc[0])) acc[3] += 1.0;
}

int64_t count_correct(const Tensor& logits, const Tensor& labels) { return detail::count_correct(logits, labels); }

bool Metric::fused_with(const Loss&) const { return false; }

namespace metrics {

void BuiltinMetric::check(const Shape& output, DType target, const Shape& target_sample) const {
  using detail::MetricKind;
  bool ok = false;
  std::string wants;
  switch (kind_) {
    case MetricKind::SparseAccuracy:  // a sequence's: counted per step in the loss's pass (fused_with)
      ok = target == DType::I32 && ((output.rank() == 1 && target_sample.rank() == 0) ||
                                    (output.rank() == 2 && target_sample == Shape{output[0]}));
      wants = "outputs (classes,) and one i32 label per sample, or (time, classes) and i32 labels (time,)";
      break;
    case MetricKind::SparseTopK:
      ok = output.rank() == 1 && target == DType::I32 && target_sample.rank() == 0;
      wants = "outputs (classes,) and one i32 label per sample";
      break;
    case MetricKind::CategoricalAccuracy:
      ok = output.rank() == 1 && target == DType::F32 && target_sample == output;
      wants = "outputs (classes,) and f32 targets of the same shape";
      break;
    default:
      ok = target == DType::F32 && target_sample == output;
      wants = "f32 targets of the output's shape";
  }
  EMBER_CHECK(ok, ShapeError,
              "metric " + name() + " takes " + wants + "; the model outputs " + output.str() +
                  " per sample and the targets are " + dtype_name(target) + " " + target_sample.str());
}

void BuiltinMetric::accumulate(const Tensor& outputs, const Tensor& targets, MetricSums& sums, int64_t slot) const {
  EMBER_CHECK(kind_ != detail::MetricKind::SparseAccuracy || outputs.rank() == 2, ShapeError,
              "metric " + name() + ": a sequence's accuracy is counted in SparseCategoricalCrossentropy's pass; " +
                  "compile the model with that loss");
  detail::metric_accumulate(kind_, param_, outputs, targets, sums.buffer(), slot);
}

bool BuiltinMetric::reads_model_output() const {
  return kind_ != detail::MetricKind::SparseAccuracy && kind_ != detail::MetricKind::SparseTopK &&
         kind_ != detail::MetricKind::CategoricalAccuracy;  // rankings: the same on logits, and no underflow ties
}

bool SparseCategoricalAccuracy::fused_with(const Loss& loss) const {
  return dynamic_cast<const losses::SparseCategoricalCrossentropy*>(&loss) != nullptr;
}

SparseTopKCategoricalAccuracy::SparseTopKCategoricalAccuracy(int k)
    : BuiltinMetric(k == 5 ? "sparse_top_k_categorical_accuracy" : "top" + std::to_string(k) + "_accuracy",
                    detail::MetricKind::SparseTopK, static_cast<float>(k)) {
  EMBER_CHECK(k >= 1, ArgumentError, "SparseTopKCategoricalAccuracy: k must be >= 1, got " + std::to_string(k));
}

namespace {
float logit_of(float threshold, bool from_logits) {
  EMBER_CHECK(threshold > 0.0f && threshold < 1.0f, ArgumentError,
              "BinaryAccuracy: the threshold must be in (0, 1), got " + std::to_string(threshold));
  return from_logits ? std::log(threshold / (1.0f - threshold)) : threshold;
}
}  // namespace

BinaryAccuracy::BinaryAccuracy(float threshold, bool from_logits)
    : BuiltinMetric("binary_accuracy", detail::MetricKind::BinaryAccuracy, logit_of(threshold, from_logits)) {}

}  // namespace metrics
}  // namespace ember
