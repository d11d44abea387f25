/// @file
/// LearningRateSchedule: the rate per epoch or per step that fit() sets on the optimizer
/// (FitOptions::learning_rate_schedule). Defined in learning_rate.cpp.
#pragma once

#include <cstdint>

namespace ember {

/// Learning-rate schedules, applied at the start of every epoch (as Keras' LearningRateScheduler
/// callback): the rate of epoch e (0-based, counted from the first epoch of the run, so a resumed
/// run gets the rates the uninterrupted one had); or, stepwise (per_step, warmup_steps), before
/// every step. On a GPU the rate lives in device memory, written before each step or replay: fit's
/// cuda_graphs capture the step once and follow any schedule (Optimizer::sync_device_rate).
struct LearningRateSchedule {
  /// The schedule's shape: a constant rate, or a Step, Exponential or Cosine decay (see `decay`).
  enum class Kind { Constant, Step, Exponential, Cosine };
  Kind kind = Kind::Constant;  ///< the schedule's shape
  float initial = 1e-3f;       ///< the rate of epoch 0
  /// Step: multiply by `decay` every `decay_epochs` epochs: initial * decay^floor(e / decay_epochs).
  /// Exponential: initial * decay^(e / decay_epochs) (smooth).
  /// Cosine: initial * ((1 - decay) * (1 + cos(pi * min(e, decay_epochs) / decay_epochs)) / 2 + decay):
  /// from `initial` down to decay * initial (Keras' alpha) at epoch decay_epochs, then flat.
  ///@{
  float decay = 0.5f;
  int decay_epochs = 1;
  ///@}
  /// Per step instead of per epoch: the rate is set before every step, at the epoch's fraction
  /// done (epoch + batch / batches): a smooth cosine or exponential decay (Keras' CosineDecay and
  /// ExponentialDecay with decay_steps = decay_epochs * batches). Step stays a staircase.
  bool per_step = false;
  /// Linear warm-up over the first warmup_steps optimizer steps (the optimizer's iterations, so a
  /// resumed run continues it): step s runs at rate * (s + 1) / warmup_steps, then the schedule's
  /// own rate. Implies per_step. 0: none.
  int64_t warmup_steps = 0;
  /// The rate of epoch `epoch`. Throws ArgumentError for a schedule that makes no sense (decay
  /// outside (0, 1] for Step/Exponential or [0, 1] for Cosine, decay_epochs < 1, initial <= 0,
  /// warmup_steps < 0).
  float rate(int epoch) const;
  /// The rate at a fractional epoch position before optimizer step `step` (0-based) (per_step).
  float rate_at(double epoch, int64_t step) const;
  bool stepwise() const { return per_step || warmup_steps > 0; }  ///< Set before every step: per_step or a warm-up.
  /// ArgumentError for a schedule that makes no sense (see rate()).
  void validate() const;
};

}  // namespace ember
