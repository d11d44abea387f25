/// @file
/// What fit() is asked and what it answers: FitOptions (epochs, batches, resumption, callbacks,
/// schedules, early stopping), the logs it passes to callbacks (EpochLogs, BatchLogs), the History
/// it returns, and evaluate()'s EvalResult. Plain values: nothing here knows the model.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "learning_rate.h"

namespace ember {

struct Batch;  // data/dataloader.h

/// Named values in the compiled order: the metrics of an epoch or an evaluation.
using NamedValues = std::vector<std::pair<std::string, double>>;
/// The value named `name`, or nullopt.
std::optional<double> find_value(const NamedValues& values, const std::string& name);

/// What fit logs for one epoch (History::epochs, FitOptions::on_epoch_end).
struct EpochLogs {
  int epoch = 0;                       ///< 1-based
  double loss = 0;                     ///< the epoch's mean training loss
  NamedValues metrics;                 ///< the compiled metrics' epoch means ("accuracy", "mae", ...)
  double accuracy = 0;                 ///< metrics' "accuracy" (0 when the model was compiled without it)
  double learning_rate = 0;            ///< the optimizer's rate during this epoch
  std::optional<double> val_loss;      ///< the loss on the validation data (with validation data)
  std::optional<double> val_accuracy;  ///< with validation data and an "accuracy" metric
  NamedValues val_metrics;             ///< the metrics on the validation data (names without "val_")
  int64_t val_samples = 0;             ///< the images the validation saw
  double seconds = 0;                  ///< the epoch's wall time, its validation included
  double images_per_second = 0;        ///< training samples (all processes) per second of training
  int64_t steps = 0;                   ///< training steps taken in this epoch
};

/// What fit() returns: the epochs' logs and how the fit ended.
struct History {
  std::vector<EpochLogs> epochs;  ///< the epochs finished in this fit
  /// A stop request (FitOptions::stop_requested) ended the fit after `stop_batch` batches of
  /// epoch `stop_epoch` (0-based; stop_batch 0: at that epoch's start). A checkpoint with
  /// epochs_done = stop_epoch, batches_done = stop_batch and the batch size resumes exactly there.
  ///@{
  bool stopped = false;
  int stop_epoch = 0;
  int64_t stop_batch = 0;
  ///@}
  /// FitOptions::early_stopping ended the fit (after the last epoch in `epochs`); `best_epoch`
  /// (1-based) had the lowest val_loss, `best_val_loss`, and its weights were restored when asked.
  ///@{
  bool stopped_early = false;
  int best_epoch = 0;
  double best_val_loss = 0;
  ///@}
};

/// What a per-batch callback sees (FitOptions::on_batch_end): Keras' on_train_batch_end logs, the
/// epoch's running means so far.
struct BatchLogs {
  int epoch = 0;             ///< 1-based
  int64_t batch = 0;         ///< 1-based, within the epoch
  int64_t step = 0;          ///< optimizer steps taken in the whole run (the optimizer's count)
  double loss = 0;           ///< the epoch's mean loss so far
  NamedValues metrics;       ///< the epoch's metric means so far
  double learning_rate = 0;  ///< the rate this step ran at
};

/// Early stopping on val_loss (Keras' EarlyStopping(monitor="val_loss")): an epoch improves when
/// its val_loss is below the best so far by more than min_delta; after `patience` epochs in a
/// row without improvement the fit stops, and with restore_best_weights the parameters and the
/// moving statistics of the best epoch come back (the optimizer's state and Dropout's step
/// counters stay as they are: a later fit does not draw the same masks again). Needs validation
/// data. A NaN val_loss never counts as an improvement.
struct EarlyStopping {
  int patience = 0;                  ///< epochs in a row without improvement before the fit stops
  double min_delta = 0;              ///< how far below the best val_loss an improvement must be
  bool restore_best_weights = true;  ///< Keras' default is false; the reason to stop early is the best model
};

/// How fit() trains: epochs, batches, resumption, callbacks and schedules.
struct FitOptions {
  int epochs = 1;             ///< epochs to train (counting those before initial_epoch)
  int64_t batch_size = 64;    ///< samples per global batch (split among replicas and processes)
  uint64_t seed = 0;          ///< shuffling (initialisation is seeded in build())
  bool shuffle = true;        ///< a seeded shuffle each epoch
  int64_t max_steps = -1;     ///< stop after this many training steps in total (-1: no limit)
  int verbose = 1;            ///< 0 prints nothing, 1 progress bar (plain lines when stdout is no terminal)
  int initial_epoch = 0;      ///< resume: epochs before this one are counted as done
  int64_t initial_batch = 0;  ///< resume mid-epoch: batches of initial_epoch done already
  /// Polled after every step (a signal handler's flag, say): true ends the fit after that step
  /// with History::stopped set; a step is never cut short. Across processes every rank stops at
  /// the same step (the strategy agrees on it).
  std::function<bool()> stop_requested{};
  /// A NaN or inf loss throws NumericalError naming the epoch and step (on the CPU at that step;
  /// on a GPU at the next read of the device-side sums: a progress update or the epoch's end),
  /// before on_epoch_end can checkpoint the diverged model.
  /// Called after every epoch with its logs (checkpointing, early stopping ...); returning false stops.
  std::function<bool(const EpochLogs&)> on_epoch_end{};
  /// Sets the optimizer's learning rate at the start of every epoch (every replica's), or before
  /// every step when the schedule is stepwise (per_step, warm-up).
  std::optional<LearningRateSchedule> learning_rate_schedule{};
  /// Called after every training step with the epoch's running logs; returning false ends the fit
  /// after that step, as stop_requested does. On a GPU reading the running sums waits for the
  /// device: a step then no longer overlaps the next one's queueing (set it only when needed).
  std::function<bool(const BatchLogs&)> on_batch_end{};
  /// Checked after on_epoch_end (which therefore sees, and may checkpoint, the epoch's own weights).
  std::optional<EarlyStopping> early_stopping{};
  /// On a GPU: after two eager steps, capture the full-size training step (gather, forward,
  /// backward, Adam) as a CUDA graph and replay it with one launch per step (CudaGraph); the
  /// short last batch runs eagerly. The same bits as eager training. A learning rate changed
  /// between steps is followed (the rate is in device memory, written before each replay);
  /// another optimizer or a restored optimizer state is seen (the graph is captured again).
  /// Nothing else may use the GPU meanwhile. Ignored on the CPU.
  bool cuda_graphs = false;
  /// Keras' validation_split: the last n - floor(n (1 - f)) samples of the training data (taken
  /// before any shuffling, so the same samples every epoch and every run) are held out as the
  /// validation data. In (0, 1); 0: none. Not together with validation data given to fit.
  double validation_split = 0.0;
  /// A per-batch hook for what no layer does (tf.data's map, a transform of one's own): called on
  /// every training batch, before its step, with the epoch and the batch's index in it; it may
  /// rewrite the batch's tensors in place or replace them (same shapes, dtypes, layouts and devices,
  /// else fit throws an ArgumentError naming the tensor: the
  /// batch is on the model's device, under a strategy this process's batch before its replicas split
  /// it). Validation, history, schedules, callbacks and checkpoints work as without it; a resumed
  /// fit calls it with the same (epoch, index) for the same batch, so a hook that seeds its random
  /// numbers from them augments a resumed run as the uninterrupted one. Evaluation batches do not
  /// pass through it. On a GPU with cuda_graphs, the step is not captured while a hook is set.
  std::function<void(Batch& batch, int epoch, int64_t index)> transform{};
};

/// What evaluate() returns: the means over the samples it saw.
struct EvalResult {
  double loss = 0;      ///< the mean loss
  double accuracy = 0;  ///< metrics' "accuracy" (0 without it)
  int64_t samples = 0;  ///< the samples evaluated
  NamedValues metrics;  ///< every compiled metric's mean, in the compiled order
};

}  // namespace ember
