// The epoch's metrics: running sums kept on the device, and accuracy.
#pragma once

#include <cstdint>

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
    // Batches added while the loss sum stayed finite: when it is not finite (a NaN or inf loss
    // poisons the sum for good, losses being >= 0), the first bad batch is this one (0-based).
    int64_t finite_batches = 0;
    bool finite() const;
  };
  // The sums since the last reset. Throws ArgumentError when a GPU kernel met a label outside
  // [0, classes) since then (the CPU path throws at once, in forward()).
  Values read() const;
  Device device() const { return buf_.device(); }
  // f64 (4): the loss sum, the correct count, an invalid-label flag, and the finite-batch count.
  Tensor& buffer() { return buf_; }
  static constexpr int64_t kSlots = 4;

 private:
  Tensor buf_;
};

// Rows of `logits` (N, K) whose argmax equals the label (i32, N); the first maximum wins on
// ties. Synchronises with a GPU.
int64_t count_correct(const Tensor& logits, const Tensor& labels);

}  // namespace ember
