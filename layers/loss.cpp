// Softmax cross-entropy loss and accuracy.
#include "layers/loss.h"

#include "core/error.h"
#include "layers/cpu/softmax_xent.h"
#include "layers/gpu.h"

namespace ember {

float SoftmaxCrossEntropy::forward(const Tensor& logits, const Tensor& labels) {
  ensure(probs_, logits.shape(), DType::F32, logits.device());
  labels_ = labels;
  if (detail::on_gpu(logits)) return detail::gpu().softmax_xent_forward(logits, labels, probs_);
  return cpu::softmax_xent_forward(logits, labels, probs_);
}

const Tensor& SoftmaxCrossEntropy::backward() {
  EMBER_CHECK(labels_.defined(), Error, "SoftmaxCrossEntropy: backward() before forward()");
  ensure(dlogits_, probs_.shape(), DType::F32, probs_.device());
  if (detail::on_gpu(probs_)) detail::gpu().softmax_xent_backward(probs_, labels_, dlogits_);
  else cpu::softmax_xent_backward(probs_, labels_, dlogits_);
  return dlogits_;
}

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  if (detail::on_gpu(logits)) return detail::gpu().count_correct(logits, labels);
  return cpu::count_correct(logits, labels);
}

}  // namespace ember
