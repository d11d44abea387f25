// SoftmaxCrossEntropy: Keras' SparseCategoricalCrossentropy(from_logits=True). Mean over the
// batch. logits (N, K) f32, labels (N) i32 in [0, K).
#pragma once

#include <cstdint>
#include <memory>

#include "../core/tensor.h"

namespace ember {

// Running sums of an epoch's metrics (sum of the samples' losses, correct predictions), kept on
// the device of the logits. On a GPU a training step then never waits for the device: the
// sums are read back only when something is printed (read() synchronises).
class MetricSums {
 public:
  explicit MetricSums(Device device = current_device());
  void reset();  // zero
  struct Values {
    double loss_sum = 0;
    int64_t correct = 0;
  };
  // The sums since the last reset. Throws ArgumentError when a GPU kernel met a label outside
  // [0, classes) since then (the CPU path throws at once, in forward()).
  Values read() const;
  Device device() const { return buf_.device(); }
  // f64 (4): the loss sum, the correct count, an invalid-label flag, and a spare slot.
  Tensor& buffer() { return buf_; }
  static constexpr int64_t kSlots = 4;

 private:
  Tensor buf_;
};

class SoftmaxCrossEntropy {
 public:
  // Adds the batch's loss sum and correct count to `sums` (on the logits' device) and keeps
  // what backward() needs: no host synchronisation on a GPU.
  void forward(const Tensor& logits, const Tensor& labels, MetricSums& sums);
  // The same through sums of its own, read back: returns the batch's mean loss (and, when
  // `correct` is given, its correct count). Synchronises with a GPU.
  float forward(const Tensor& logits, const Tensor& labels, int64_t* correct = nullptr);
  // d(mean loss)/d(logits), written (=); valid until the next forward.
  const Tensor& backward();
  // Softmax probabilities of the last forward.
  const Tensor& probabilities() const { return probs_; }

 private:
  Tensor probs_, labels_, dlogits_;
  std::unique_ptr<MetricSums> own_sums_;  // for the float-returning forward
};

// Rows of `logits` whose argmax equals the label.
int64_t count_correct(const Tensor& logits, const Tensor& labels);

}  // namespace ember
