// Softmax cross-entropy loss and accuracy.
#include "loss.h"

#include <algorithm>
#include <cstring>

#include "../core/dispatch.h"
#include "../core/error.h"
#include "cpu/softmax_xent.h"
#include "cuda_ops.h"

namespace ember {

float SoftmaxCrossEntropy::forward(const Tensor& logits, const Tensor& labels, int64_t* correct) {
  if (!own_sums_ || own_sums_->device() != logits.device()) own_sums_ = std::make_unique<MetricSums>(logits.device());
  own_sums_->reset();
  forward(logits, labels, *own_sums_);
  const MetricSums::Values v = own_sums_->read();
  if (correct) *correct = v.correct;
  return static_cast<float>(v.loss_sum / static_cast<double>(std::max<int64_t>(logits.dim(0), 1)));
}

const Tensor& SoftmaxCrossEntropy::backward() {
  EMBER_CHECK(labels_.defined(), Error, "SoftmaxCrossEntropy: backward() before forward()");
  ensure(dlogits_, probs_.shape(), DType::F32, probs_.device());
  if (detail::on_gpu(probs_))
    detail::layer_cuda_ops().softmax_xent_backward(probs_, labels_, dlogits_);
  else
    cpu::softmax_xent_backward(probs_, labels_, dlogits_);
  return dlogits_;
}

void SoftmaxCrossEntropy::forward(const Tensor& logits, const Tensor& labels, MetricSums& sums) {
  EMBER_CHECK(sums.device() == logits.device(), DeviceError,
              "SoftmaxCrossEntropy: the metric sums are on " + sums.device().str() + " but the logits on " +
                  logits.device().str());
  ensure(probs_, logits.shape(), DType::F32, logits.device());
  labels_ = labels;
  if (detail::on_gpu(logits)) {
    detail::layer_cuda_ops().softmax_xent_accumulate(logits, labels, probs_, sums.buffer());
    return;
  }
  const double n = static_cast<double>(logits.dim(0));
  const double loss = static_cast<double>(cpu::softmax_xent_forward(logits, labels, probs_)) * n;
  double* acc = sums.buffer().data<double>();
  acc[0] += loss;
  acc[1] += static_cast<double>(cpu::count_correct(logits, labels));
}

MetricSums::MetricSums(Device device) : buf_(Tensor::zeros(Shape{kSlots}, DType::F64, device)) {}

void MetricSums::reset() { buf_.zero(); }  // on a GPU queued, no wait

MetricSums::Values MetricSums::read() const {
  double host[kSlots];
  if (buf_.device().is_cpu()) {
    std::memcpy(host, buf_.raw(), sizeof host);
  } else {
    Tensor t = buf_.to(Device::cpu());  // waits for the device's queued work
    std::memcpy(host, t.raw(), sizeof host);
  }
  EMBER_CHECK(host[2] == 0.0, ArgumentError,
              "softmax cross-entropy (" + buf_.device().str() + "): a label was outside [0, classes)");
  return {host[0], static_cast<int64_t>(host[1])};
}

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  if (detail::on_gpu(logits)) return detail::layer_cuda_ops().count_correct(logits, labels);
  return cpu::count_correct(logits, labels);
}

}  // namespace ember
