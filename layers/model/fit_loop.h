// The epoch loop behind Model::fit and the data-parallel strategies: batches from a DataLoader,
// the steps, running metrics, the Keras progress bar, schedules, validation, history, callbacks
// and early stopping. What a step is (one model, N replicas, N ranks) is the TrainingTarget's.
// Knows the loader, the progress bar, fit_options.h and the target; nothing of the model.
#pragma once

#include <string>
#include <vector>

#include "../../data/dataloader.h"
#include "fit_options.h"

namespace ember {

/// The loss and metric sums of an epoch so far.
struct StepResult {
  double loss_sum = 0;          ///< sum over the samples of their loss
  std::vector<double> metrics;  ///< per compiled metric, the sum over the samples of its value
  int64_t samples = 0;          ///< the samples the sums are over
  /// The first step (0-based, of this fit's steps in the epoch) whose loss was not finite, or -1.
  int64_t first_nonfinite = -1;
};

/// What fit_loop trains: one model (Model::fit) or a strategy's replicas and ranks
/// (DataParallelStrategy::fit). The loop calls it in this order per epoch: set_learning_rate
/// (per epoch, or before each step when the schedule is stepwise, with iterations()),
/// begin_epoch, then per batch learning_rate() (the step's rate, for the logs), step, and
/// epoch_totals when it reports (the bar, on_batch_end with iterations(), a host-side check),
/// agree_stop after the step when something may ask to stop (epoch_totals again at a stop
/// mid-epoch); at the epoch's end epoch_totals, reduce_epoch, learning_rate() and evaluate;
/// keep_best_weights and restore_best_weights for early stopping.
class TrainingTarget {
 public:
  virtual ~TrainingTarget() = default;
  /// The compiled metrics' names, in StepResult::metrics' order (the progress bar's and logs' keys).
  virtual std::vector<std::string> metric_names() const = 0;
  /// Before the epoch's (0-based) first step, after the loader's start_epoch at `first_batch`:
  /// zeroes the epoch's sums, starts other replicas' loaders.
  virtual void begin_epoch(int epoch, int64_t first_batch) = 0;
  /// Trains on one batch (queued, on a GPU); returns the samples it trained on (every replica's).
  virtual int64_t step(const Batch& batch) = 0;
  /// The epoch's loss and metric sums so far (samples left 0: the loop counts them). Reading them
  /// waits for the device, so the loop asks only when the progress bar draws, a callback wants
  /// them, or the epoch ends, unless totals_on_host().
  virtual StepResult epoch_totals() = 0;
  /// The sums are on the host: epoch_totals is cheap, read after every step, and a non-finite
  /// loss is caught at its own step.
  virtual bool totals_on_host() const = 0;
  /// Why the loss stopped being finite when the batch that did it told (on the CPU: "input 0, row
  /// 3 holds NaN", its inputs checked at its own step); empty when nothing was found.
  virtual std::string nonfinite_inputs() const { return {}; }
  /// This process's epoch totals as the job's (multi-process); the same by default.
  virtual StepResult reduce_epoch(const StepResult& mine) { return mine; }
  /// The loss and metrics on the validation data at the end of an epoch.
  virtual EvalResult evaluate(const Dataset& data, int64_t batch_size) = 0;
  /// The learning rate of every replica (FitOptions::learning_rate_schedule), and the current one.
  ///@{
  virtual void set_learning_rate(float rate) = 0;
  virtual float learning_rate() const = 0;
  ///@}
  /// The optimizer's step count (a stepwise schedule's warm-up; BatchLogs::step).
  virtual int64_t iterations() const = 0;
  /// Early stopping: a copy of the weights (parameters and moving statistics) as the best so far,
  /// and that copy put back into every replica.
  ///@{
  virtual void keep_best_weights() = 0;
  virtual void restore_best_weights() = 0;
  ///@}
  /// This process's stop request as the one every process acts on (multi-process: any rank's
  /// request stops all at the same step); the same by default.
  virtual bool agree_stop(bool mine) { return mine; }
};

/// FitOptions::validation_split applied: the training part of `train` and the validation data
/// (the held-out part, or `validation`). ArgumentError for a fraction outside [0, 1), one that
/// leaves either part empty, or a split together with validation data.
struct FitData {
  Dataset train, held_out;
  const Dataset* validation = nullptr;  ///< &held_out, the caller's, or null
};
void split_for_validation(const Dataset& train, const FitOptions& options, const Dataset* validation, FitData& out);

/// The epochs of FitOptions over `loader`'s batches, trained by `target`; `print`: progress
/// output (rank 0 only, and only when options.verbose > 0).
History fit_loop(DataLoader& loader, const FitOptions& options, const Dataset* validation, TrainingTarget& target,
                 bool print);

}  // namespace ember
