// Model::fit / evaluate / predict: the Keras-like loops over a DataLoader.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>

#include "../../core/cuda_graph.h"
#include "../../core/error.h"
#include "../../core/runtime.h"
#include "../../data/dataloader.h"
#include "fit_loop.h"
#include "model.h"
#include "progress.h"

namespace ember {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The loss and every metric as means over the samples so far: {"loss", ...}, then the metrics.
ProgressBar::Metrics means(const StepResult& r, const std::vector<std::string>& names) {
  const double n = static_cast<double>(r.samples);
  ProgressBar::Metrics out{{"loss", r.loss_sum / n}};
  for (size_t i = 0; i < names.size(); ++i) out.push_back({names[i], i < r.metrics.size() ? r.metrics[i] / n : 0.0});
  return out;
}
}  // namespace

void Model::check_data(const Dataset& data, const char* what) const {
  EMBER_CHECK(data.num_inputs() == input_shapes_.size(), ShapeError,
              std::string(what) + ": the data has " + std::to_string(data.num_inputs()) + " inputs but the model " +
                  std::to_string(input_shapes_.size()));
  for (size_t k = 0; k < input_shapes_.size(); ++k) {
    const DataInput& in = data.input(k);
    const std::string which = input_shapes_.size() == 1 ? "samples" : "input '" + input_names_[k] + "'";
    EMBER_CHECK(in.name.empty() || in.name == input_names_[k], ShapeError,
                std::string(what) + ": the data's input " + std::to_string(k) + " is '" + in.name +
                    "' but the model's is '" + input_names_[k] + "' (Model::arranged puts them in order)");
    const Shape sample = in.values.shape().without_batch();
    EMBER_CHECK(sample == input_shapes_[k], ShapeError,
                std::string(what) + ": the data's " + which + (input_shapes_.size() == 1 ? " are " : " is ") +
                    sample.str() + " but the model was built for " + input_shapes_[k].str());
  }
  require_heads(what);
  EMBER_CHECK(data.num_targets() == outputs_.size(), ShapeError,
              std::string(what) + ": the data has " + std::to_string(data.num_targets()) + " targets but the model " +
                  std::to_string(outputs_.size()) + " outputs");
  const std::vector<std::string> outs = output_names();
  for (size_t k = 0; k < outputs_.size(); ++k) {
    const DataTarget& t = data.target(k);
    EMBER_CHECK(t.name.empty() || t.name == outs[k], ShapeError,
                std::string(what) + ": the data's target " + std::to_string(k) + " is '" + t.name +
                    "' but the model's output is '" + outs[k] + "' (Model::arranged puts them in order)");
    check_targets(t.values.dtype(), t.values.shape().without_batch(), what, k);
    const Shape& out = output_shapes_[static_cast<size_t>(outputs_[k])];
    if (data.num_classes() > 0 && t.values.dtype() == DType::I32 && out.rank() == 1)
      EMBER_CHECK(data.num_classes() <= out[0], ShapeError,
                  std::string(what) + ": the data has " + std::to_string(data.num_classes()) +
                      " classes but the model outputs " + std::to_string(out[0]) + " logits" +
                      (outputs_.size() == 1 ? std::string() : " at '" + outs[k] + "'"));
  }
}

Dataset Model::arranged(const Dataset& data, const char* what) const {
  require_built(what);
  Dataset d = data.arranged_for(input_names_, output_names(), what);
  check_data(d, what);
  return d;
}

void split_for_validation(const Dataset& train, const FitOptions& options, const Dataset* validation, FitData& out) {
  const double f = options.validation_split;
  out.validation = validation;
  if (f == 0.0) {
    out.train = train;
    return;
  }
  EMBER_CHECK(validation == nullptr, ArgumentError, "fit: give validation data or validation_split, not both");
  EMBER_CHECK(f > 0.0 && f < 1.0, ArgumentError,
              "fit: validation_split must be in (0, 1) (0: none), got " + std::to_string(f));
  // Keras' split: the first floor(n (1 - f)) samples train, the rest validate.
  const int64_t held = train.size() - static_cast<int64_t>(std::floor(static_cast<double>(train.size()) * (1.0 - f)));
  EMBER_CHECK(held > 0 && held < train.size(), ArgumentError,
              "fit: validation_split " + std::to_string(f) + " of " + std::to_string(train.size()) +
                  " samples leaves an empty part");
  out.train = train.slice(0, train.size() - held);
  out.held_out = train.slice(train.size() - held, train.size());
  out.validation = &out.held_out;
}

History Model::fit(const Dataset& all_train, const FitOptions& options, const Dataset* given_validation) {
  FitData data;
  split_for_validation(all_train, options, given_validation, data);
  EMBER_CHECK(options.epochs >= 1, ArgumentError, "fit: epochs must be >= 1, got " + std::to_string(options.epochs));
  EMBER_CHECK(options.initial_epoch >= 0 && options.initial_epoch <= options.epochs, ArgumentError,
              "fit: initial_epoch " + std::to_string(options.initial_epoch) + " is outside 0.." +
                  std::to_string(options.epochs));
  EMBER_CHECK(optimizer_ != nullptr, Error, "fit: compile() the model with an optimizer first");
  if (!built()) {
    const Shape sample = data.train.sample_shape();
    build_model(graph_ ? nullptr : &sample, options.seed);
  }
  // The inputs in the model's order (named ones matched by name), checked.
  const Dataset train = arranged(data.train, "fit");
  std::optional<Dataset> arranged_validation;
  if (data.validation) arranged_validation = arranged(*data.validation, "fit (validation data)");
  const Dataset* validation = arranged_validation ? &*arranged_validation : nullptr;

  // On a GPU the dataset moves to the device once and batches are gathered there.
  const bool graphs = options.cuda_graphs && device_.is_cuda();
  DataLoader loader(train, {.batch_size = options.batch_size,
                            .shuffle = options.shuffle,
                            .seed = options.seed,
                            .device = device_,
                            .defer_device_gather = graphs});
  FitLoopHooks hooks;
  hooks.metric_names = metric_names();
  MetricSums sums = make_sums();
  hooks.begin_epoch = [&sums](int, int64_t) { sums.reset(); };
  // With graphs: two eager full-size steps make every lazy choice (cuDNN plans, workspaces, the
  // optimizer's state), the third is captured, the rest replay it. The graph holds the optimizer's
  // buffers: another optimizer or a restored state means a new capture (after two eager steps,
  // the first uploading the new values); so does a change of what the captured kernels are or take
  // as arguments: a kernel setting (TF32, NHWC, fused, deterministic, find, the convolution policy:
  // kernel_settings_version) or a layer's random seed. The learning rate is not in the graph but in device
  // memory (Optimizer::sync_device_rate, written before each replay): a schedule, per epoch or
  // per step, replays the one graph.
  CudaGraph graph;
  struct GraphKey {
    uint64_t optimizer = 0;
    int64_t state_version = -1;
    uint64_t kernel_settings = 0, seeds = 0;
    bool operator==(const GraphKey&) const = default;
  } graph_key, warm_key;  // the captured graph's; the eager warm-up steps'
  const auto current_key = [this] {
    uint64_t seeds = 0;  // every layer's seed, mixed in order (a swap changes it too)
    for (const auto& l : layers_) seeds = (seeds ^ l->random_seed()) * 0x100000001B3ull + 0x9E3779B97F4A7C15ull;
    return GraphKey{optimizer_->id(), optimizer_->state_version(), kernel_settings_version(), seeds};
  };
  int eager_full_steps = 0;
  constexpr int kWarmupSteps = 2;
  hooks.step = [&](const Batch& b) {
    const bool full = b.rows() == options.batch_size;
    if (graphs && full) {
      const GraphKey key = current_key();
      if (graph.captured() && !(key == graph_key)) graph.reset();
      if (!(key == warm_key)) {  // the warm-up (device-side counts, state) starts again
        warm_key = key;
        eager_full_steps = 0;
      }
      if (!graph.captured() && eager_full_steps >= kWarmupSteps) {
        const int64_t iterations = optimizer_->iterations();
        optimizer_->sync_device_rate();  // outside the capture: the graph reads the rate, never writes it
        try {
          graph = CudaGraph::capture(device_, [&] {
            b.gather();
            train_step(b.inputs, b.targets, sums);  // queued into the graph, not run
          });
          graph_key = key;
          graph.launch();                  // this step: its host part (the optimizer's count) ran in the capture
        } catch (const BackendError& e) {  // CUDA's, or cuDNN's / cuBLAS's inside the capture
          optimizer_->set_iterations(iterations);  // nothing ran: the device's count is uploaded again
          throw CudaError(std::string("cuda graphs: capturing the training step failed (train without graphs): ") +
                          e.what());
        } catch (...) {
          optimizer_->set_iterations(iterations);
          throw;
        }
        return StepResult{.metrics = {}, .samples = b.rows()};
      }
      if (graph.captured()) {
        optimizer_->sync_device_rate();  // this step's rate (a schedule may have changed it)
        graph.launch();
        optimizer_->count_step();
        return StepResult{.metrics = {}, .samples = b.rows()};
      }
      ++eager_full_steps;
    } else if (graphs) {
      eager_full_steps = 0;  // the layers now hold other shapes: warm up again before a capture
    }
    if (b.gather) b.gather();
    train_step(b.inputs, b.targets, sums);  // queues the step; waits for nothing on a GPU
    return StepResult{.metrics = {}, .samples = b.rows()};
  };
  hooks.epoch_totals = [&sums, this] {
    const MetricSums::Values v = sums.read();
    return StepResult{
        .loss_sum = v.loss_sum, .metrics = metric_sums(v), .first_nonfinite = v.finite() ? -1 : v.finite_batches};
  };
  std::unique_ptr<DataLoader> val_loader;  // built at the first evaluation, kept for the others
  hooks.evaluate = [&](const Dataset& d, int64_t bs) {
    if (!val_loader)
      val_loader =
          std::make_unique<DataLoader>(d, DataLoaderOptions{.batch_size = bs, .shuffle = false, .device = device_});
    return evaluate(*val_loader);
  };
  hooks.set_learning_rate = [this](float lr) { optimizer_->set_learning_rate(lr); };
  hooks.learning_rate = [this] { return optimizer_->learning_rate(); };
  hooks.iterations = [this] { return optimizer_->iterations(); };
  // Early stopping's copy, on the model's device: the parameters and the moving statistics (not
  // the step counters: a later fit must not draw the same Dropout masks again).
  Tensor best_params, best_stats;
  hooks.keep_best_weights = [&] {
    best_params = params_.clone();
    best_stats = averaged_state().clone();
  };
  hooks.restore_best_weights = [&] {
    params_.copy_from(best_params);
    averaged_state().copy_from(best_stats);
  };
  hooks.totals_on_host = device_.is_cpu();
  hooks.print = options.verbose > 0;
  return fit_loop(loader, options, validation, hooks);
}

History fit_loop(DataLoader& loader, const FitOptions& options, const Dataset* validation, const FitLoopHooks& hooks) {
  EMBER_CHECK(options.initial_batch >= 0 && options.initial_batch < loader.num_batches(), ArgumentError,
              "fit: initial_batch " + std::to_string(options.initial_batch) + " is outside 0.." +
                  std::to_string(loader.num_batches() - 1) + " (a checkpoint of another batch size?)");
  if (options.learning_rate_schedule) {
    options.learning_rate_schedule->validate();
    EMBER_CHECK(hooks.set_learning_rate != nullptr, ArgumentError,
                "fit: this strategy cannot follow a learning-rate schedule");
  }
  if (options.early_stopping) {
    EMBER_CHECK(validation != nullptr, ArgumentError, "fit: early stopping watches val_loss: give validation data");
    EMBER_CHECK(options.early_stopping->patience >= 0 && std::isfinite(options.early_stopping->min_delta) &&
                    options.early_stopping->min_delta >= 0,
                ArgumentError,
                "fit: early stopping needs patience >= 0 and a finite min_delta >= 0, got patience " +
                    std::to_string(options.early_stopping->patience) + ", min_delta " +
                    std::to_string(options.early_stopping->min_delta));
    EMBER_CHECK(hooks.keep_best_weights && hooks.restore_best_weights, ArgumentError,
                "fit: this strategy cannot restore the best weights");
  }
  int since_best = 0;      // epochs since val_loss last improved
  bool have_best = false;  // a best epoch (and, with restore_best_weights, its weights) is kept
  History history;
  int64_t steps_total = 0;
  const bool limited = options.max_steps >= 0;
  const bool print = hooks.print && options.verbose > 0;
  bool stop = false;  // agreed by every process, after a step
  for (int epoch = options.initial_epoch; epoch < options.epochs; ++epoch) {
    if (limited && steps_total >= options.max_steps) break;
    if (stop) {
      history.stopped = true;
      history.stop_epoch = epoch;
      history.stop_batch = 0;
      break;
    }
    const LearningRateSchedule* stepwise = options.learning_rate_schedule && options.learning_rate_schedule->stepwise()
                                               ? &*options.learning_rate_schedule
                                               : nullptr;
    if (options.learning_rate_schedule && !stepwise)
      hooks.set_learning_rate(options.learning_rate_schedule->rate(epoch));
    if (print) std::printf("Epoch %d/%d\n", epoch + 1, options.epochs);
    std::fflush(stdout);
    const auto t0 = Clock::now();
    ProgressBar bar(loader.num_batches());
    const int64_t first = epoch == options.initial_epoch ? options.initial_batch : 0;
    bar.start_at(first);
    loader.start_epoch(epoch, first);
    if (hooks.begin_epoch) hooks.begin_epoch(epoch, first);
    Batch batch;
    StepResult sum;
    int64_t steps = 0;  // this fit's steps in the epoch; the epoch's position is first + steps
    // The running sums: from the step results, or read from where the step keeps them. A
    // non-finite loss found there ends the fit, naming its step.
    auto running = [&] {
      if (!hooks.epoch_totals) return sum;
      StepResult t = hooks.epoch_totals();
      t.samples = sum.samples;
      if (t.first_nonfinite >= 0)
        throw NumericalError(
            "the loss became " + std::string(std::isnan(t.loss_sum) ? "NaN" : "infinite") + " at epoch " +
            std::to_string(epoch + 1) + ", step " + std::to_string(first + t.first_nonfinite + 1) + "/" +
            std::to_string(loader.num_batches()) + ": training diverged (a learning rate too high?) and was stopped");
      return t;
    };
    sum.metrics.assign(hooks.metric_names.size(), 0.0);
    while (loader.next(batch)) {
      if (stepwise) {
        const double at = epoch + static_cast<double>(first + steps) / static_cast<double>(loader.num_batches());
        hooks.set_learning_rate(stepwise->rate_at(at, hooks.iterations()));
      }
      const double step_rate = hooks.learning_rate ? hooks.learning_rate() : 0.0;
      const StepResult r = hooks.step(batch);
      sum.loss_sum += r.loss_sum;
      for (size_t i = 0; i < r.metrics.size() && i < sum.metrics.size(); ++i) sum.metrics[i] += r.metrics[i];
      sum.samples += r.samples;
      ++steps;
      ++steps_total;
      const bool draw = print && bar.due(first + steps);
      bool callback_stop = false;
      if (draw || hooks.totals_on_host || options.on_batch_end) {
        const StepResult now = running();
        const ProgressBar::Metrics m = means(now, hooks.metric_names);
        if (draw) bar.update(first + steps, m);
        if (options.on_batch_end) {
          BatchLogs logs;
          logs.epoch = epoch + 1;
          logs.batch = first + steps;
          logs.step = hooks.iterations ? hooks.iterations() : steps_total;
          logs.loss = m[0].second;
          logs.metrics.assign(m.begin() + 1, m.end());
          logs.learning_rate = step_rate;
          callback_stop = !options.on_batch_end(logs);
        }
      }
      if (options.stop_requested || options.on_batch_end) {
        const bool mine = callback_stop || (options.stop_requested && options.stop_requested());
        stop = hooks.agree_stop ? hooks.agree_stop(mine) : mine;
      }
      if (stop && first + steps < loader.num_batches()) {  // mid-epoch: the epoch is not logged
        running();                                         // the steps so far were finite (or this throws)
        if (print) bar.interrupt(first + steps);
        history.stopped = true;
        history.stop_epoch = epoch;
        history.stop_batch = first + steps;
        return history;
      }
      if (limited && steps_total >= options.max_steps) break;
    }
    const StepResult local = running();  // waits for the epoch's queued device work
    const double train_seconds = seconds_since(t0);
    const StepResult total = hooks.reduce_epoch ? hooks.reduce_epoch(local) : local;
    EpochLogs logs;
    logs.epoch = epoch + 1;
    logs.steps = steps;
    ProgressBar::Metrics metrics = means(total, hooks.metric_names);
    logs.loss = metrics[0].second;
    logs.metrics.assign(metrics.begin() + 1, metrics.end());
    logs.accuracy = find_value(logs.metrics, "accuracy").value_or(0.0);
    logs.images_per_second = static_cast<double>(total.samples) / train_seconds;
    if (hooks.learning_rate) logs.learning_rate = hooks.learning_rate();
    if (validation) {
      const EvalResult v = hooks.evaluate(*validation, std::max<int64_t>(options.batch_size, 256));
      logs.val_loss = v.loss;
      logs.val_metrics = v.metrics;
      if (const auto a = find_value(v.metrics, "accuracy")) logs.val_accuracy = *a;
      logs.val_samples = v.samples;
      metrics.push_back({"val_loss", v.loss});
      for (const auto& [name, value] : v.metrics) metrics.push_back({"val_" + name, value});
    }
    logs.seconds = seconds_since(t0);
    if (print) bar.finish(first + steps, train_seconds, metrics);
    history.epochs.push_back(logs);
    if (options.on_epoch_end && !options.on_epoch_end(logs)) break;
    if (const auto& es = options.early_stopping) {
      // Keras' EarlyStopping: better than the best by more than min_delta resets the wait.
      // A NaN val_loss never improves (as Keras), not even as the first epoch.
      const bool finite = std::isfinite(*logs.val_loss);
      if (finite && (!have_best || *logs.val_loss < history.best_val_loss - es->min_delta)) {
        have_best = true;
        history.best_epoch = logs.epoch;
        history.best_val_loss = *logs.val_loss;
        since_best = 0;
        if (es->restore_best_weights) hooks.keep_best_weights();
      } else if (++since_best >= es->patience) {
        history.stopped_early = true;
        if (es->restore_best_weights && have_best) hooks.restore_best_weights();
        if (print)
          std::printf("Early stopping after epoch %d: val_loss has not improved on epoch %d's %.4f for %d epoch%s%s\n",
                      logs.epoch, history.best_epoch, history.best_val_loss, since_best, since_best == 1 ? "" : "s",
                      es->restore_best_weights ? "; its weights restored" : "");
        break;
      }
    }
  }
  if (stop && !history.stopped) {  // asked during the last epoch's last step: nothing left
    history.stopped = true;
    history.stop_epoch = options.epochs;
  }
  return history;
}

EvalResult Model::evaluate(const Dataset& data, int64_t batch_size) {
  require_built("evaluate");
  const Dataset arranged_data = arranged(data, "evaluate");
  DataLoader loader(arranged_data, {.batch_size = batch_size, .shuffle = false, .device = device_});
  return evaluate(loader);
}

EvalResult Model::evaluate(DataLoader& loader) {
  require_built("evaluate");
  EMBER_CHECK(
      loader.device() == device_, DeviceError,
      "evaluate: the loader builds batches on " + loader.device().str() + " but the model is on " + device_.str());
  check_data(loader.dataset(), "evaluate");
  loader.start_epoch(0);
  Batch batch;
  int64_t seen = 0;
  MetricSums sums = make_sums();  // on a GPU: summed there, read once at the end
  while (loader.next(batch)) {
    if (batch.gather) batch.gather();
    evaluate_batch(batch.inputs, batch.targets, sums);
    seen += batch.rows();
  }
  return eval_result(sums.read(), seen);
}

EvalResult Model::eval_result(const MetricSums::Values& v, int64_t seen) const {
  EvalResult r{.loss = v.loss_sum / static_cast<double>(seen), .samples = seen, .metrics = {}};
  const std::vector<double> sums = metric_sums(v);
  const std::vector<std::string> names = metric_names();
  for (size_t i = 0; i < sums.size() && i < names.size(); ++i)
    r.metrics.push_back({names[i], sums[i] / static_cast<double>(seen)});
  r.accuracy = find_value(r.metrics, "accuracy").value_or(0.0);
  return r;
}

Tensor Model::predict(const Tensor& x, int64_t batch_size) {
  EMBER_CHECK(outputs_.size() <= 1, ArgumentError,
              "predict: the model has " + std::to_string(outputs_.size()) + " outputs: predict_outputs() gives each");
  return predict_of({&x, 1}, batch_size)[0];
}

Tensor Model::predict(const std::vector<Tensor>& xs, int64_t batch_size) {
  EMBER_CHECK(outputs_.size() <= 1, ArgumentError,
              "predict: the model has " + std::to_string(outputs_.size()) + " outputs: predict_outputs() gives each");
  return predict_of(xs, batch_size)[0];
}

std::vector<Tensor> Model::predict_outputs(const std::vector<Tensor>& xs, int64_t batch_size) {
  return predict_of(xs, batch_size);
}

std::vector<Tensor> Model::predict_of(std::span<const Tensor> given, int64_t batch_size) {
  require_built("predict");
  EMBER_CHECK(batch_size > 0, ArgumentError, "predict: batch size must be > 0");
  EMBER_CHECK(given.size() == input_shapes_.size(), ArgumentError,
              "predict: the model takes " + std::to_string(input_shapes_.size()) + " inputs, given " +
                  std::to_string(given.size()));
  // Row-major copies on the model's device where needed (views: no copy otherwise).
  std::vector<Tensor> xs;
  for (size_t k = 0; k < given.size(); ++k) {
    const Tensor& x = given[k];
    const Shape& in = input_shapes_[k];
    // The whole sample shape: a view of other samples as the model's shape would be silent nonsense.
    EMBER_CHECK(x.dtype() == DType::F32 && x.rank() == in.rank() + 1 && x.shape().without_batch() == in &&
                    x.dim(0) == given[0].dim(0),
                ShapeError,
                "predict: expects f32 input" + (given.size() == 1 ? std::string() : " '" + input_names_[k] + "'") +
                    " (" + std::to_string(given[0].dim(0)) + ", ...) with samples " + in.str() + ", given " + x.str());
    Tensor rm = x.layout() == Layout::RowMajor ? x : x.to_layout(Layout::RowMajor);
    xs.push_back(rm.device() == device_ ? rm : rm.to(device_));
  }
  const int64_t n = given[0].dim(0);
  const SliceViewsDropper drop{*this};  // the slices view the caller's inputs: not kept after
  std::vector<Tensor> outs;
  for (const Shape& s : output_shapes()) outs.push_back(Tensor::empty(s.with_batch(n), DType::F32, Device::cpu()));
  // CPU micro-batches (set_cpu_micro_batch): a batch larger than a slice runs slice by slice.
  const int64_t step = std::min(batch_size, slice_rows(slice_inputs(xs, 0, std::min(batch_size, n)), false));
  for (int64_t i = 0; i < n; i += step) {
    const int64_t b = std::min(step, n - i);
    run_layers(slice_inputs(xs, i, b), false, 0, layers_.size(), "predict", true);
    for (size_t k = 0; k < outs.size(); ++k) {  // device to host when the model is on a GPU
      const Shape s = outs[k].shape().without_batch();
      outs[k].view(i * s.numel(), s.with_batch(b)).copy_from(output(k));
    }
  }
  return outs;
}

}  // namespace ember
