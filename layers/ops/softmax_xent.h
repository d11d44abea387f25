// The softmax cross-entropy's dispatches: stateless (the loss keeps its probabilities and
// labels, row-major on every backend). Private to the library.
#pragma once

#include <cstdint>

#include "../../core/tensor.h"

namespace ember::detail {

// probs = softmax(logits); sums (f64, MetricSums' slots) += {loss sum, correct count}, and a
// bad-label flag on a GPU (the CPU throws ArgumentError at once). No host sync on a GPU.
// positions: rows per sample (a sequence's steps), whose losses the sample's loss averages.
void softmax_xent_accumulate(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& sums,
                             int64_t positions = 1);
// dlogits = (probs - onehot(labels)) / mean_rows, written (=): mean_rows is the batch's N, or
// the whole batch's N when these rows are one slice of it.
void softmax_xent_backward(const Tensor& probs, const Tensor& labels, Tensor& dlogits, int64_t mean_rows);
// The two above, on a GPU under set_fused_loss as one kernel (the same bits).
void softmax_xent_accumulate_backward(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& sums,
                                      Tensor& dlogits, int64_t mean_rows, int64_t positions = 1);
// Rows of `logits` whose argmax equals the label (synchronises with a GPU).
int64_t count_correct(const Tensor& logits, const Tensor& labels);

}  // namespace ember::detail
