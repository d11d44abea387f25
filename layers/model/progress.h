// Keras-style progress output for fit():
//   Epoch 1/5
//   938/938 [==============================] - 9s 10ms/step - loss: 0.1542 - accuracy: 0.9531 - val_loss: ...
// On a terminal the bar redraws in place (carriage return) with an ETA while the epoch runs;
// when stdout is not a terminal only the final line of each epoch is printed (no '\r').
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace ember {

class ProgressBar {
 public:
  using Metrics = std::vector<std::pair<std::string, double>>;
  ProgressBar(int64_t total_steps, std::FILE* out = stdout);
  ProgressBar(int64_t total_steps, std::FILE* out, bool interactive);
  // Redraws at most every 50 ms on a terminal; prints nothing otherwise.
  void update(int64_t step, const Metrics& metrics);
  // Whether update(step, ...) would draw now (so the caller can skip computing the metrics).
  bool due(int64_t step) const;
  // Final line of the epoch (always printed), with the extra metrics (val_*) appended. The time
  // shown is the whole epoch; ms/step is from `train_seconds` (validation excluded).
  void finish(int64_t steps_done, double train_seconds, const Metrics& metrics);
  // The epoch resumes at step `first` (a mid-epoch checkpoint): times per step count from there.
  void start_at(int64_t first) { first_ = first; }
  // The epoch stops at `step` (a stop request): a bar drawn in place gets its line ended.
  void interrupt(int64_t step);

  static std::string format_line(int64_t step, int64_t total, double elapsed_s, double per_step_s, bool done,
                                 const Metrics& metrics);

 private:
  int64_t total_;
  int64_t first_ = 0;
  std::FILE* out_;
  bool interactive_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace ember
