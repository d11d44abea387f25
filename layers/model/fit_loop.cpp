// The epoch loop (see fit_loop.h): per epoch the schedule, the steps with their progress and
// callbacks, then the epoch's logs, validation, callbacks and early stopping.
#include "fit_loop.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "../../core/error.h"
#include "progress.h"

namespace ember {

namespace {
// What FitOptions::transform must keep of each tensor of a batch: shape, dtype, layout, device.
std::vector<std::string> batch_form(const Batch& b) {
  std::vector<std::string> form;
  for (const std::vector<Tensor>* ts : {&b.inputs, &b.targets})
    for (const Tensor& t : *ts) form.push_back(t.str());
  return form;
}

void check_transform_kept(const std::vector<std::string>& before, const Batch& b) {
  const std::vector<std::string> after = batch_form(b);
  const size_t inputs = b.inputs.size();
  for (size_t i = 0; i < std::max(before.size(), after.size()); ++i) {
    const std::string was = i < before.size() ? before[i] : "nothing", is = i < after.size() ? after[i] : "nothing";
    EMBER_CHECK(was == is, ArgumentError,
                "FitOptions::transform changed the batch's " +
                    (i < inputs ? "input " + std::to_string(i) : "target " + std::to_string(i - inputs)) + " from " +
                    was + " to " + is + ": the hook must keep each tensor's shape, dtype, layout and device");
  }
}
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The loss and every metric as means over the samples so far: {"loss", ...}, then the metrics.
ProgressBar::Metrics means(const StepResult& r, const std::vector<std::string>& names) {
  const double n = static_cast<double>(r.samples);
  ProgressBar::Metrics out{{"loss", r.loss_sum / n}};
  for (size_t i = 0; i < names.size(); ++i) out.push_back({names[i], i < r.metrics.size() ? r.metrics[i] / n : 0.0});
  return out;
}

void check_options(const DataLoader& loader, const FitOptions& options, const Dataset* validation) {
  EMBER_CHECK(options.initial_batch >= 0 && options.initial_batch < loader.num_batches(), ArgumentError,
              "fit: initial_batch " + std::to_string(options.initial_batch) + " is outside 0.." +
                  std::to_string(loader.num_batches() - 1) + " (a checkpoint of another batch size?)");
  if (options.learning_rate_schedule) options.learning_rate_schedule->validate();
  if (const auto& es = options.early_stopping) {
    EMBER_CHECK(validation != nullptr, ArgumentError, "fit: early stopping watches val_loss: give validation data");
    EMBER_CHECK(es->patience >= 0 && std::isfinite(es->min_delta) && es->min_delta >= 0, ArgumentError,
                "fit: early stopping needs patience >= 0 and a finite min_delta >= 0, got patience " +
                    std::to_string(es->patience) + ", min_delta " + std::to_string(es->min_delta));
  }
}

// One fit's run through its epochs: what the loop keeps from one epoch to the next.
class Loop {
 public:
  Loop(DataLoader& loader, const FitOptions& options, const Dataset* validation, TrainingTarget& target, bool print)
      : loader_(loader),
        options_(options),
        validation_(validation),
        target_(target),
        print_(print && options.verbose > 0),
        names_(target.metric_names()) {}

  History run() {
    for (int epoch = options_.initial_epoch; epoch < options_.epochs; ++epoch) {
      if (limited() && steps_total_ >= options_.max_steps) break;
      if (stop_) {  // asked at the last step of the epoch before
        stopped_at(epoch, 0);
        break;
      }
      if (!train_epoch(epoch)) return history_;  // stopped mid-epoch: the epoch is not logged
      if (!end_epoch(epoch)) break;
    }
    if (stop_ && !history_.stopped) stopped_at(options_.epochs, 0);  // asked during the last epoch's last step
    return history_;
  }

 private:
  bool limited() const { return options_.max_steps >= 0; }
  void stopped_at(int epoch, int64_t batch) {
    history_.stopped = true;
    history_.stop_epoch = epoch;
    history_.stop_batch = batch;
  }

  // The epoch's sums so far (read from the target); a non-finite loss there ends the fit,
  // naming its step.
  StepResult running(int epoch) {
    StepResult t = target_.epoch_totals();
    t.samples = samples_;
    if (t.first_nonfinite >= 0) {
      const std::string data = target_.nonfinite_inputs();
      throw NumericalError("the loss became " + std::string(std::isnan(t.loss_sum) ? "NaN" : "infinite") +
                           " at epoch " + std::to_string(epoch + 1) + ", step " +
                           std::to_string(first_ + t.first_nonfinite + 1) + "/" +
                           std::to_string(loader_.num_batches()) +
                           (data.empty() ? ": training diverged (a learning rate too high?) and was stopped"
                                         : ": the batch's data is not finite (" + data + "); training was stopped"));
    }
    return t;
  }

  // The epoch's steps; false when a stop request ended the fit before the epoch's last batch.
  bool train_epoch(int epoch) {
    const auto& schedule = options_.learning_rate_schedule;
    const LearningRateSchedule* stepwise = schedule && schedule->stepwise() ? &*schedule : nullptr;
    if (schedule && !stepwise) target_.set_learning_rate(schedule->rate(epoch));
    if (print_) std::printf("Epoch %d/%d\n", epoch + 1, options_.epochs);
    std::fflush(stdout);
    t0_ = Clock::now();
    bar_.emplace(loader_.num_batches());
    first_ = epoch == options_.initial_epoch ? options_.initial_batch : 0;
    bar_->start_at(first_);
    loader_.start_epoch(epoch, first_);
    target_.begin_epoch(epoch, first_);
    steps_ = 0;
    samples_ = 0;
    Batch batch;
    while (loader_.next(batch)) {
      if (options_.transform) {  // the batch, gathered, to the caller's hook
        if (batch.gather) {
          batch.gather();
          batch.gather = nullptr;
        }
        const std::vector<std::string> form = batch_form(batch);
        options_.transform(batch, epoch, first_ + steps_);
        check_transform_kept(form, batch);
      }
      if (stepwise) {
        const double at = epoch + static_cast<double>(first_ + steps_) / static_cast<double>(loader_.num_batches());
        target_.set_learning_rate(stepwise->rate_at(at, target_.iterations()));
      }
      const double step_rate = target_.learning_rate();
      samples_ += target_.step(batch);
      ++steps_;
      ++steps_total_;
      const bool callback_stop = after_step(epoch, step_rate);
      if (options_.stop_requested || options_.on_batch_end)
        stop_ = target_.agree_stop(callback_stop || (options_.stop_requested && options_.stop_requested()));
      if (stop_ && first_ + steps_ < loader_.num_batches()) {
        running(epoch);  // the steps so far were finite (or this throws)
        if (print_) bar_->interrupt(first_ + steps_);
        stopped_at(epoch, first_ + steps_);
        return false;
      }
      if (limited() && steps_total_ >= options_.max_steps) break;
    }
    return true;
  }

  // The progress bar and on_batch_end after a step; true when the callback asks to stop.
  bool after_step(int epoch, double step_rate) {
    const bool draw = print_ && bar_->due(first_ + steps_);
    if (!draw && !target_.totals_on_host() && !options_.on_batch_end) return false;
    const ProgressBar::Metrics m = means(running(epoch), names_);
    if (draw) bar_->update(first_ + steps_, m);
    if (!options_.on_batch_end) return false;
    BatchLogs logs;
    logs.epoch = epoch + 1;
    logs.batch = first_ + steps_;
    logs.step = target_.iterations();
    logs.loss = m[0].second;
    logs.metrics.assign(m.begin() + 1, m.end());
    logs.learning_rate = step_rate;
    return !options_.on_batch_end(logs);
  }

  // The epoch's logs, validation and callbacks; false when the fit ends here.
  bool end_epoch(int epoch) {
    const StepResult local = running(epoch);  // waits for the epoch's queued device work
    const double train_seconds = seconds_since(t0_);
    const StepResult total = target_.reduce_epoch(local);
    EpochLogs logs;
    logs.epoch = epoch + 1;
    logs.steps = steps_;
    ProgressBar::Metrics metrics = means(total, names_);
    logs.loss = metrics[0].second;
    logs.metrics.assign(metrics.begin() + 1, metrics.end());
    logs.accuracy = find_value(logs.metrics, "accuracy").value_or(0.0);
    logs.images_per_second = static_cast<double>(total.samples) / train_seconds;
    logs.learning_rate = target_.learning_rate();
    if (validation_) {
      const EvalResult v = target_.evaluate(*validation_, std::max<int64_t>(options_.batch_size, 256));
      logs.val_loss = v.loss;
      logs.val_metrics = v.metrics;
      if (const auto a = find_value(v.metrics, "accuracy")) logs.val_accuracy = *a;
      logs.val_samples = v.samples;
      metrics.push_back({"val_loss", v.loss});
      for (const auto& [name, value] : v.metrics) metrics.push_back({"val_" + name, value});
    }
    logs.seconds = seconds_since(t0_);
    if (print_) bar_->finish(first_ + steps_, train_seconds, metrics);
    history_.epochs.push_back(logs);
    if (options_.on_epoch_end && !options_.on_epoch_end(logs)) return false;
    return !(options_.early_stopping && stops_early(logs));
  }

  // Keras' EarlyStopping: better than the best by more than min_delta resets the wait. A NaN
  // val_loss never improves (as Keras), not even as the first epoch.
  bool stops_early(const EpochLogs& logs) {
    const EarlyStopping& es = *options_.early_stopping;
    if (std::isfinite(*logs.val_loss) && (!have_best_ || *logs.val_loss < history_.best_val_loss - es.min_delta)) {
      have_best_ = true;
      history_.best_epoch = logs.epoch;
      history_.best_val_loss = *logs.val_loss;
      since_best_ = 0;
      if (es.restore_best_weights) target_.keep_best_weights();
      return false;
    }
    if (++since_best_ < es.patience) return false;
    history_.stopped_early = true;
    if (es.restore_best_weights && have_best_) target_.restore_best_weights();
    if (print_)
      std::printf("Early stopping after epoch %d: val_loss has not improved on epoch %d's %.4f for %d epoch%s%s\n",
                  logs.epoch, history_.best_epoch, history_.best_val_loss, since_best_, since_best_ == 1 ? "" : "s",
                  es.restore_best_weights ? "; its weights restored" : "");
    return true;
  }

  DataLoader& loader_;
  const FitOptions& options_;
  const Dataset* validation_;
  TrainingTarget& target_;
  const bool print_;
  const std::vector<std::string> names_;
  History history_;
  int64_t steps_total_ = 0;  // this fit's steps
  bool stop_ = false;        // agreed by every process, after a step
  int since_best_ = 0;       // epochs since val_loss last improved
  bool have_best_ = false;   // a best epoch (and, with restore_best_weights, its weights) is kept
  // The epoch under way: its start, progress bar, first batch, steps and samples so far.
  Clock::time_point t0_;
  std::optional<ProgressBar> bar_;
  int64_t first_ = 0, steps_ = 0, samples_ = 0;
};
}  // namespace

History fit_loop(DataLoader& loader, const FitOptions& options, const Dataset* validation, TrainingTarget& target,
                 bool print) {
  check_options(loader, options, validation);
  return Loop(loader, options, validation, target, print).run();
}

}  // namespace ember
