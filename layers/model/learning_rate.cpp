// LearningRateSchedule (learning_rate.h).
#include "learning_rate.h"

#include <cmath>
#include <numbers>

#include "../../core/error.h"

namespace ember {

void LearningRateSchedule::validate() const {
  EMBER_CHECK(std::isfinite(initial) && initial > 0.0f, ArgumentError,
              "learning-rate schedule: the initial rate must be > 0, got " + std::to_string(initial));
  EMBER_CHECK(warmup_steps >= 0, ArgumentError,
              "learning-rate schedule: warmup_steps must be >= 0, got " + std::to_string(warmup_steps));
  EMBER_CHECK(decay_epochs >= 1, ArgumentError,
              "learning-rate schedule: decay_epochs must be >= 1, got " + std::to_string(decay_epochs));
  if (kind == Kind::Step || kind == Kind::Exponential)
    EMBER_CHECK(std::isfinite(decay) && decay > 0.0f && decay <= 1.0f, ArgumentError,
                "learning-rate schedule: the decay factor must be in (0, 1], got " + std::to_string(decay));
  if (kind == Kind::Cosine)
    EMBER_CHECK(std::isfinite(decay) && decay >= 0.0f && decay <= 1.0f, ArgumentError,
                "learning-rate schedule: cosine's floor (alpha) must be in [0, 1], got " + std::to_string(decay));
}

float LearningRateSchedule::rate(int epoch) const { return rate_at(static_cast<double>(epoch), -1); }

float LearningRateSchedule::rate_at(double e, int64_t step) const {
  validate();
  EMBER_CHECK(e >= 0, ArgumentError, "learning-rate schedule: epoch " + std::to_string(e) + " < 0");
  if (step >= 0 && step < warmup_steps)  // linear warm-up to the schedule's rate at this point
    return static_cast<float>(rate_at(e, -1) * (static_cast<double>(step) + 1.0) / static_cast<double>(warmup_steps));
  const double n = decay_epochs, lr0 = initial, d = decay;
  switch (kind) {
    case Kind::Constant:
      return initial;
    case Kind::Step:
      return static_cast<float>(lr0 * std::pow(d, std::floor(e / n)));
    case Kind::Exponential:
      return static_cast<float>(lr0 * std::pow(d, e / n));
    case Kind::Cosine: {
      const double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * std::min(e, n) / n));
      return static_cast<float>(lr0 * ((1.0 - d) * cosine + d));
    }
  }
  return initial;
}

}  // namespace ember
