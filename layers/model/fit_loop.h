// The epoch loop behind Sequential::fit and the distribution strategies: batches from a
// DataLoader, a step callback, running metrics, the Keras progress bar, validation, history
// and callbacks. What a "step" is (one model, N replicas, N ranks) is the caller's business.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "../../data/dataloader.h"
#include "sequential.h"

namespace ember {

struct StepResult {
  double loss_sum = 0;          // sum over the batch's samples of their loss
  std::vector<double> metrics;  // per compiled metric, the sum over the samples of its value
  int64_t samples = 0;
  // From epoch_totals: the first step (0-based, of this fit's steps in the epoch) whose loss was
  // not finite, or -1.
  int64_t first_nonfinite = -1;
};

struct FitLoopHooks {
  // The compiled metrics' names, in StepResult::metrics' order (the progress bar's and logs' keys).
  std::vector<std::string> metric_names;
  // Trains on one batch from the loader. With `epoch_totals` set, only `samples` of the result
  // counts: the loss and metric sums are kept by the step (on the device) and read from there.
  std::function<StepResult(const Batch&)> step;
  // Called with the epoch (0-based) and its first batch before its first step, after the
  // loader's start_epoch (to zero device-side sums, start other replicas' loaders).
  std::function<void(int epoch, int64_t first_batch)> begin_epoch;
  // The epoch's loss and metric sums so far when the step keeps them on a device. Reading them
  // waits for the device, so the loop asks only when the progress bar draws and at the end of
  // the epoch (that read also makes the epoch's time include all of its queued GPU work).
  std::function<StepResult()> epoch_totals;
  // Validation at the end of each epoch (only called when validation data is given).
  std::function<EvalResult(const Dataset&, int64_t batch_size)> evaluate;
  // Sets every replica's learning rate (FitOptions::learning_rate_schedule).
  std::function<void(float)> set_learning_rate;
  // The current learning rate (for the logs).
  std::function<float()> learning_rate;
  // The optimizer's step count (a stepwise schedule's warm-up; BatchLogs::step).
  std::function<int64_t()> iterations;
  // Early stopping: keeps a copy of the weights (parameters and state) as the best so far, and
  // puts that copy back into every replica.
  std::function<void()> keep_best_weights;
  std::function<void()> restore_best_weights;
  // Turns this process's epoch totals into global ones (multi-process); identity by default.
  std::function<StepResult(const StepResult&)> reduce_epoch;
  // Turns this process's stop request into the one every process acts on (multi-process: any
  // rank's request stops all at the same step); identity by default.
  std::function<bool(bool)> agree_stop;
  // The sums are on the host, so epoch_totals is cheap: read after every step, a non-finite
  // loss is caught at its own step.
  bool totals_on_host = false;
  bool print = true;  // progress output (rank 0 only)
};

// FitOptions::validation_split applied: the training part of `train` and the validation data
// (the held-out part, or `validation`). ArgumentError for a fraction outside [0, 1), one that
// leaves either part empty, or a split together with validation data.
struct FitData {
  Dataset train, held_out;
  const Dataset* validation = nullptr;  // &held_out, the caller's, or null
};
void split_for_validation(const Dataset& train, const FitOptions& options, const Dataset* validation, FitData& out);

History fit_loop(DataLoader& loader, const FitOptions& options, const Dataset* validation, const FitLoopHooks& hooks);

}  // namespace ember
