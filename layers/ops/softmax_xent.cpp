// Softmax cross-entropy dispatch.
#include "softmax_xent.h"

#include "../../core/dispatch.h"
#include "../../core/runtime.h"
#include "../cpu/softmax_xent.h"
#include "../cuda_ops.h"

namespace ember::detail {

void softmax_xent_accumulate(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& sums,
                             int64_t positions) {
  if (on_gpu(logits))
    layer_cuda_ops().softmax_xent_accumulate(logits, labels, probs, sums, positions);
  else
    cpu::softmax_xent_accumulate(logits, labels, probs, sums, positions);
}

namespace {
void check_mean_rows(int64_t mean_rows, const Tensor& rows) {
  EMBER_CHECK(mean_rows >= rows.dim(0) && mean_rows > 0, ArgumentError,
              "softmax cross-entropy: the mean is over " + std::to_string(mean_rows) + " rows but " +
                  std::to_string(rows.dim(0)) + " are given");
}
}  // namespace

void softmax_xent_backward(const Tensor& probs, const Tensor& labels, Tensor& dlogits, int64_t mean_rows) {
  check_mean_rows(mean_rows, probs);
  if (on_gpu(probs))
    layer_cuda_ops().softmax_xent_backward(probs, labels, dlogits, mean_rows);
  else
    cpu::softmax_xent_backward(probs, labels, dlogits, mean_rows);
}

void softmax_xent_accumulate_backward(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& sums,
                                      Tensor& dlogits, int64_t mean_rows, int64_t positions) {
  if (on_gpu(logits) && fused_loss()) {
    check_mean_rows(mean_rows, logits);
    layer_cuda_ops().softmax_xent_accumulate_backward(logits, labels, probs, sums, dlogits, mean_rows, positions);
    return;
  }
  softmax_xent_accumulate(logits, labels, probs, sums, positions);
  softmax_xent_backward(probs, labels, dlogits, mean_rows);
}

int64_t count_correct(const Tensor& logits, const Tensor& labels) {
  if (on_gpu(logits)) return layer_cuda_ops().count_correct(logits, labels);
  return cpu::count_correct(logits, labels);
}

}  // namespace ember::detail
