// Softmax cross-entropy loss.
#include "loss.h"

#include <algorithm>

#include "../core/error.h"
#include "ops/softmax_xent.h"

namespace ember {

float SoftmaxCrossEntropy::forward(const Tensor& logits, const Tensor& labels, int64_t* correct) {
  if (!own_sums_ || own_sums_->device() != logits.device()) own_sums_ = std::make_unique<MetricSums>(logits.device());
  own_sums_->reset();
  forward(logits, labels, *own_sums_);
  const MetricSums::Values v = own_sums_->read();
  if (correct) *correct = v.correct;
  return static_cast<float>(v.loss_sum / static_cast<double>(std::max<int64_t>(logits.dim(0), 1)));
}

const Tensor& SoftmaxCrossEntropy::backward(int64_t mean_rows) {
  EMBER_CHECK(labels_.defined(), Error, "SoftmaxCrossEntropy: backward() before forward()");
  ensure(dlogits_, probs_.shape(), DType::F32, probs_.device());
  detail::softmax_xent_backward(probs_, labels_, dlogits_,
                                mean_rows == 0 ? std::max<int64_t>(probs_.dim(0), 1) : mean_rows);
  return dlogits_;
}

void SoftmaxCrossEntropy::forward(const Tensor& logits, const Tensor& labels, MetricSums& sums) {
  EMBER_CHECK(sums.device() == logits.device(), DeviceError,
              "SoftmaxCrossEntropy: the metric sums are on " + sums.device().str() + " but the logits on " +
                  logits.device().str());
  ensure(probs_, logits.shape(), DType::F32, logits.device());
  labels_ = labels;
  detail::softmax_xent_accumulate(logits, labels, probs_, sums.buffer());
}

}  // namespace ember
