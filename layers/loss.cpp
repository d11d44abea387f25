// The losses (see loss.h): shape checks here, the arithmetic in ops/losses and ops/softmax_xent.
#include "loss.h"

#include <algorithm>
#include <typeinfo>

#include "../core/error.h"
#include "ops/losses.h"
#include "ops/softmax_xent.h"

namespace ember {

namespace {
std::string describe(DType target, const Shape& target_sample) {
  return std::string(dtype_name(target)) + " " + target_sample.str();
}

void check_fit(bool ok, const std::string& loss, const std::string& wants, const Shape& output, DType target,
               const Shape& target_sample) {
  EMBER_CHECK(ok, ShapeError,
              loss + " takes " + wants + "; the model outputs " + output.str() + " per sample and the targets are " +
                  describe(target, target_sample));
}
}  // namespace

void Loss::check_targets(const Tensor&, const Shape&) const {}

float Loss::value(const Tensor& outputs, const Tensor& targets) {
  MetricSums& sums = scratch_sums(outputs.device());
  forward(outputs, targets, sums);
  return static_cast<float>(sums.read().loss_sum / static_cast<double>(std::max<int64_t>(outputs.dim(0), 1)));
}

const Tensor& Loss::forward_backward(const Tensor& outputs, const Tensor& targets, MetricSums& sums,
                                     int64_t mean_rows) {
  forward(outputs, targets, sums);
  return backward(mean_rows);
}

int64_t Loss::rows_for_mean(int64_t mean_rows, const Tensor& outputs) {
  return mean_rows == 0 ? std::max<int64_t>(outputs.dim(0), 1) : mean_rows;
}

MetricSums& Loss::scratch_sums(Device device) {
  if (!own_sums_ || own_sums_->device() != device) own_sums_ = std::make_unique<MetricSums>(device);
  own_sums_->reset();
  return *own_sums_;
}

namespace losses {

// --- SparseCategoricalCrossentropy ----------------------------------------------------------

void SparseCategoricalCrossentropy::check(const Shape& output, DType target, const Shape& target_sample) const {
  const bool one = output.rank() == 1 && target_sample.rank() == 0;
  const bool sequence = output.rank() == 2 && target_sample == Shape{output[0]};
  check_fit((one || sequence) && target == DType::I32, name(),
            "logits (classes,) and one i32 label per sample, or (time, classes) and i32 labels (time,)", output, target,
            target_sample);
}

void SparseCategoricalCrossentropy::check_targets(const Tensor& labels, const Shape& output) const {
  EMBER_CHECK(labels.dtype() == DType::I32 && labels.device().is_cpu(), ShapeError,
              name() + ": labels must be i32 on the cpu, got " + labels.str());
  const int64_t classes = output.rank() >= 1 ? output[output.rank() - 1] : 0;
  const int32_t* y = labels.data<int32_t>();
  for (int64_t i = 0; i < labels.numel(); ++i)
    EMBER_CHECK(y[i] >= 0 && y[i] < classes, ArgumentError,
                "softmax cross-entropy: label " + std::to_string(y[i]) + " at row " + std::to_string(i) +
                    " is outside [0, " + std::to_string(classes) + ")");
}

float SparseCategoricalCrossentropy::forward(const Tensor& logits, const Tensor& labels, int64_t* correct) {
  MetricSums& sums = scratch_sums(logits.device());
  forward(logits, labels, sums);
  const MetricSums::Values v = sums.read();
  if (correct) *correct = v.correct;
  return static_cast<float>(v.loss_sum / static_cast<double>(std::max<int64_t>(logits.dim(0), 1)));
}

void SparseCategoricalCrossentropy::prepare(const Tensor& logits, const Tensor& labels, const MetricSums& sums) {
  EMBER_CHECK(sums.device() == logits.device(), DeviceError,
              "SoftmaxCrossEntropy: the metric sums are on " + sums.device().str() + " but the logits on " +
                  logits.device().str());
  ensure(probs_, logits.shape(), DType::F32, logits.device());
  // A sequence's (N, T, K) logits run as N * T rows, each sample's loss the mean of its T rows'.
  samples_ = logits.rank() >= 1 ? logits.dim(0) : 0;
  positions_ = logits.rank() == 3 ? logits.dim(1) : 1;
  const int64_t k = logits.rank() >= 1 ? logits.dim(logits.rank() - 1) : 0;
  rows_ = logits.rank() == 3 ? logits.reshape(Shape{samples_ * positions_, k}) : logits;
  labels_ = logits.rank() == 3 && labels.numel() == samples_ * positions_ ? labels.reshape(Shape{samples_ * positions_})
                                                                          : labels;
  prob_rows_ = probs_.reshape(rows_.shape());
}

void SparseCategoricalCrossentropy::forward(const Tensor& logits, const Tensor& labels, MetricSums& sums) {
  prepare(logits, labels, sums);
  detail::softmax_xent_accumulate(rows_, labels_, prob_rows_, sums.buffer(), positions_);
}

const Tensor& SparseCategoricalCrossentropy::backward(int64_t mean_rows) {
  EMBER_CHECK(labels_.defined(), Error, "SoftmaxCrossEntropy: backward() before forward()");
  ensure(dlogits_, probs_.shape(), DType::F32, probs_.device());
  Tensor d = dlogits_.reshape(prob_rows_.shape());
  detail::softmax_xent_backward(prob_rows_, labels_, d, rows_for_mean(mean_rows, probs_) * positions_);
  return dlogits_;
}

const Tensor& SparseCategoricalCrossentropy::forward_backward(const Tensor& logits, const Tensor& labels,
                                                              MetricSums& sums, int64_t mean_rows) {
  // A subclass that overrides forward() or backward() gets them called, as the default does.
  if (typeid(*this) != typeid(SparseCategoricalCrossentropy))
    return Loss::forward_backward(logits, labels, sums, mean_rows);
  prepare(logits, labels, sums);
  ensure(dlogits_, logits.shape(), DType::F32, logits.device());
  Tensor d = dlogits_.reshape(rows_.shape());
  detail::softmax_xent_accumulate_backward(rows_, labels_, prob_rows_, sums.buffer(), d,
                                           rows_for_mean(mean_rows, logits) * positions_, positions_);
  return dlogits_;
}

// --- CategoricalCrossentropy ----------------------------------------------------------------

CategoricalCrossentropy::CategoricalCrossentropy(float label_smoothing) : smoothing_(label_smoothing) {
  EMBER_CHECK(label_smoothing >= 0.0f && label_smoothing <= 1.0f, ArgumentError,
              "CategoricalCrossentropy: label_smoothing must be in [0, 1], got " + std::to_string(label_smoothing));
}

void CategoricalCrossentropy::check(const Shape& output, DType target, const Shape& target_sample) const {
  check_fit(output.rank() == 1 && target == DType::F32 && target_sample == output, name(),
            "logits (classes,) and f32 targets of the same shape (one-hot or a distribution)", output, target,
            target_sample);
}

void CategoricalCrossentropy::forward(const Tensor& logits, const Tensor& targets, MetricSums& sums) {
  EMBER_CHECK(
      sums.device() == logits.device(), DeviceError,
      name() + ": the metric sums are on " + sums.device().str() + " but the logits on " + logits.device().str());
  ensure(probs_, logits.shape(), DType::F32, logits.device());
  targets_ = targets;
  detail::categorical_xent_accumulate(smoothing_, logits, targets, probs_, sums.buffer());
}

const Tensor& CategoricalCrossentropy::backward(int64_t mean_rows) {
  EMBER_CHECK(targets_.defined(), Error, name() + ": backward() before forward()");
  ensure(dlogits_, probs_.shape(), DType::F32, probs_.device());
  detail::categorical_xent_backward(smoothing_, probs_, targets_, dlogits_, rows_for_mean(mean_rows, probs_));
  return dlogits_;
}

// --- Pointwise losses -----------------------------------------------------------------------

void PointwiseLoss::check(const Shape& output, DType target, const Shape& target_sample) const {
  check_fit(target == DType::F32 && target_sample == output, name(), "f32 targets of the output's shape", output,
            target, target_sample);
}

void PointwiseLoss::forward(const Tensor& outputs, const Tensor& targets, MetricSums& sums) {
  EMBER_CHECK(
      sums.device() == outputs.device(), DeviceError,
      name() + ": the metric sums are on " + sums.device().str() + " but the outputs on " + outputs.device().str());
  outputs_ = outputs;
  targets_ = targets;
  detail::point_loss_accumulate(kind_, param_, outputs, targets, sums.buffer());
}

const Tensor& PointwiseLoss::backward(int64_t mean_rows) {
  EMBER_CHECK(targets_.defined(), Error, name() + ": backward() before forward()");
  ensure(grad_, outputs_.shape(), DType::F32, outputs_.device());
  detail::point_loss_backward(kind_, param_, outputs_, targets_, grad_, rows_for_mean(mean_rows, outputs_));
  return grad_;
}

Huber::Huber(float delta) : PointwiseLoss(detail::PointLoss::Huber, delta) {
  EMBER_CHECK(delta > 0.0f, ArgumentError, "Huber: delta must be > 0, got " + std::to_string(delta));
}

BinaryCrossentropy::BinaryCrossentropy(bool from_logits, float label_smoothing)
    : PointwiseLoss(from_logits ? detail::PointLoss::BinaryXentLogits : detail::PointLoss::BinaryXentProbabilities,
                    label_smoothing) {
  EMBER_CHECK(label_smoothing >= 0.0f && label_smoothing <= 1.0f, ArgumentError,
              "BinaryCrossentropy: label_smoothing must be in [0, 1], got " + std::to_string(label_smoothing));
}

std::unique_ptr<Loss> BinaryCrossentropy::clone() const {
  return std::make_unique<BinaryCrossentropy>(kind_ == detail::PointLoss::BinaryXentLogits, param_);
}

}  // namespace losses
}  // namespace ember
