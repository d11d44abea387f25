// Softmax cross-entropy from logits with int32 labels, mean over the batch; and accuracy.
// logits (N, K) f32 row-major, labels (N) i32 in [0, K).
#pragma once

#include <cstdint>

#include "../../core/tensor.h"

namespace ember::cpu {

// Writes the softmax probabilities into probs (N, K) and returns the mean loss.
// Throws ArgumentError for a label outside [0, K).
float softmax_xent_forward(const Tensor& logits, const Tensor& labels, Tensor& probs);
// The training step's form (the CUDA twin's signature): probs as above; sums (4 f64, MetricSums'
// slots in layers/metrics.h) += {batch loss sum / positions, correct count}: a sequence's rows are
// `positions` per sample, whose loss is their mean. Throws as above.
void softmax_xent_accumulate(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& sums,
                             int64_t positions = 1);
// dlogits = (probs - onehot(labels)) / N, written (=).
void softmax_xent_backward(const Tensor& probs, const Tensor& labels, Tensor& dlogits, int64_t mean_rows);
// Number of rows whose argmax equals the label (first maximum wins on ties).
int64_t count_correct(const Tensor& logits, const Tensor& labels);

}  // namespace ember::cpu
