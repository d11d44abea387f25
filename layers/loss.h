// SoftmaxCrossEntropy: Keras' SparseCategoricalCrossentropy(from_logits=True). Mean over the
// batch. logits (N, K) f32, labels (N) i32 in [0, K).
#pragma once

#include <cstdint>
#include <memory>

#include "../core/tensor.h"
#include "metrics.h"

namespace ember {

class SoftmaxCrossEntropy {
 public:
  // Adds the batch's loss sum and correct count to `sums` (on the logits' device) and keeps
  // what backward() needs: no host synchronisation on a GPU.
  void forward(const Tensor& logits, const Tensor& labels, MetricSums& sums);
  // The same through sums of its own, read back: returns the batch's mean loss (and, when
  // `correct` is given, its correct count). Synchronises with a GPU.
  float forward(const Tensor& logits, const Tensor& labels, int64_t* correct = nullptr);
  // d(mean loss)/d(logits), written (=); valid until the next forward. `mean_rows`: the rows
  // the mean is over when the last forward's logits are a slice of a larger batch (0: theirs).
  const Tensor& backward(int64_t mean_rows = 0);
  // Softmax probabilities of the last forward.
  const Tensor& probabilities() const { return probs_; }

 private:
  Tensor probs_, labels_, dlogits_;
  std::unique_ptr<MetricSums> own_sums_;  // for the float-returning forward
};

}  // namespace ember
