// SoftmaxCrossEntropy: Keras' SparseCategoricalCrossentropy(from_logits=True). Mean over the
// batch. logits (N, K) f32, labels (N) i32 in [0, K).
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace ember {

class SoftmaxCrossEntropy {
 public:
  // Returns the mean loss and keeps what backward() needs.
  float forward(const Tensor& logits, const Tensor& labels);
  // d(mean loss)/d(logits), written (=); valid until the next forward.
  const Tensor& backward();
  // Softmax probabilities of the last forward.
  const Tensor& probabilities() const { return probs_; }

 private:
  Tensor probs_, labels_, dlogits_;
};

// Rows of `logits` whose argmax equals the label.
int64_t count_correct(const Tensor& logits, const Tensor& labels);

}  // namespace ember
