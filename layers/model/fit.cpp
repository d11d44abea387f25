// Model::fit / evaluate / predict: the Keras-like loops over a DataLoader. fit's epochs are
// fit_loop's (fit_loop.h), with the model as its TrainingTarget.
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "../../core/error.h"
#include "../../data/dataloader.h"
#include "fit_loop.h"
#include "graphed_step.h"
#include "micro_batch.h"
#include "model.h"
#include "params.h"
#include "topology.h"

namespace ember {

std::optional<double> find_value(const NamedValues& values, const std::string& name) {
  for (const auto& [k, v] : values)
    if (k == name) return v;
  return std::nullopt;
}

void Model::check_data(const Dataset& data, const char* what) const {
  EMBER_CHECK(data.num_inputs() == topo_->input_shapes.size(), ShapeError,
              std::string(what) + ": the data has " + std::to_string(data.num_inputs()) + " inputs but the model " +
                  std::to_string(topo_->input_shapes.size()));
  for (size_t k = 0; k < topo_->input_shapes.size(); ++k) {
    const DataInput& in = data.input(k);
    const std::string which = topo_->input_shapes.size() == 1 ? "samples" : "input '" + topo_->input_names[k] + "'";
    EMBER_CHECK(in.name.empty() || in.name == topo_->input_names[k], ShapeError,
                std::string(what) + ": the data's input " + std::to_string(k) + " is '" + in.name +
                    "' but the model's is '" + topo_->input_names[k] + "' (Model::arranged puts them in order)");
    const Shape sample = in.values.shape().without_batch();
    EMBER_CHECK(sample == topo_->input_shapes[k], ShapeError,
                std::string(what) + ": the data's " + which + (topo_->input_shapes.size() == 1 ? " are " : " is ") +
                    sample.str() + " but the model was built for " + topo_->input_shapes[k].str());
  }
  require_heads(what);
  EMBER_CHECK(data.num_targets() == topo_->outputs.size(), ShapeError,
              std::string(what) + ": the data has " + std::to_string(data.num_targets()) + " targets but the model " +
                  std::to_string(topo_->outputs.size()) + " outputs");
  const std::vector<std::string> outs = output_names();
  for (size_t k = 0; k < topo_->outputs.size(); ++k) {
    const DataTarget& t = data.target(k);
    EMBER_CHECK(t.name.empty() || t.name == outs[k], ShapeError,
                std::string(what) + ": the data's target " + std::to_string(k) + " is '" + t.name +
                    "' but the model's output is '" + outs[k] + "' (Model::arranged puts them in order)");
    check_targets(t.values.dtype(), t.values.shape().without_batch(), what, k);
    const Shape& out = topo_->output_shapes[static_cast<size_t>(topo_->outputs[k])];
    if (data.num_classes() > 0 && t.values.dtype() == DType::I32 && out.rank() == 1)
      EMBER_CHECK(data.num_classes() <= out[0], ShapeError,
                  std::string(what) + ": the data has " + std::to_string(data.num_classes()) +
                      " classes but the model outputs " + std::to_string(out[0]) + " logits" +
                      (topo_->outputs.size() == 1 ? std::string() : " at '" + outs[k] + "'"));
  }
}

Dataset Model::arranged(const Dataset& data, const char* what) const {
  require_built(what);
  Dataset d = data.arranged_for(topo_->input_names, output_names(), what);
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

namespace {
// "input K, row R holds NaN" (or inf) for the first non-finite value of the f32 CPU inputs; "" when
// there is none.
std::string first_nonfinite_input(const std::vector<Tensor>& inputs) {
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (x.dtype() != DType::F32 || !x.device().is_cpu() || x.numel() == 0) continue;
    const Tensor rm = x.layout() == Layout::RowMajor ? x : x.to_layout(Layout::RowMajor);
    const float* v = rm.f32();
    const int64_t per_row = rm.numel() / rm.dim(0);
    for (int64_t i = 0; i < rm.numel(); ++i)
      if (!std::isfinite(v[i]))
        return "input " + std::to_string(k) + ", row " + std::to_string(i / per_row) + " of the batch holds " +
               (std::isnan(v[i]) ? "NaN" : "an infinity");
  }
  return {};
}

// One model as fit_loop's target: its steps (eager or graphed), its sums on its device, its
// validation loader (built at the first evaluation, kept for the others: on a GPU the data is
// uploaded once per fit) and early stopping's copy of its weights.
class ModelTraining final : public TrainingTarget {
 public:
  ModelTraining(Model& model, const FitOptions& options) : model_(model), sums_(model.make_sums()) {
    if (options.cuda_graphs && model.device().is_cuda() && !options.transform) graphed_.emplace(options.batch_size);
  }
  std::vector<std::string> metric_names() const override { return model_.metric_names(); }
  void begin_epoch(int, int64_t) override {
    sums_.reset();
    checked_ = false;
    nonfinite_.clear();
  }
  int64_t step(const Batch& b) override {
    if (graphed_) {
      graphed_->run(model_, b, sums_);
    } else {
      if (b.gather) b.gather();
      model_.train_step(b.inputs, b.targets, sums_);  // queues the step; waits for nothing on a GPU
      // On the CPU the sums are at hand: the first batch that makes them non-finite has its inputs
      // checked, so that a NaN in the data is named as the data's.
      if (model_.device().is_cpu() && !checked_ && !sums_.read().finite()) {
        checked_ = true;
        nonfinite_ = first_nonfinite_input(b.inputs);
      }
    }
    return b.rows();
  }
  std::string nonfinite_inputs() const override { return nonfinite_; }
  StepResult epoch_totals() override {
    const MetricSums::Values v = sums_.read();
    return StepResult{.loss_sum = v.loss_sum,
                      .metrics = model_.metric_sums(v),
                      .first_nonfinite = v.finite() ? -1 : v.finite_batches};
  }
  bool totals_on_host() const override { return model_.device().is_cpu(); }
  EvalResult evaluate(const Dataset& d, int64_t batch_size) override {
    if (!val_loader_)
      val_loader_ = std::make_unique<DataLoader>(
          d, DataLoaderOptions{.batch_size = batch_size, .shuffle = false, .device = model_.device()});
    return model_.evaluate(*val_loader_);
  }
  // The model's optimizer at each call: a callback may compile() another during the fit.
  void set_learning_rate(float rate) override { model_.optimizer()->set_learning_rate(rate); }
  float learning_rate() const override { return model_.optimizer()->learning_rate(); }
  int64_t iterations() const override { return model_.optimizer()->iterations(); }
  // The parameters and the moving statistics, on the model's device (not the step counters: a
  // later fit must not draw the same Dropout masks again).
  void keep_best_weights() override {
    best_params_ = model_.params().clone();
    best_stats_ = model_.averaged_state().clone();
  }
  void restore_best_weights() override {
    model_.params().copy_from(best_params_);
    model_.averaged_state().copy_from(best_stats_);
  }

 private:
  Model& model_;
  MetricSums sums_;
  std::optional<detail::GraphedStep> graphed_;
  std::unique_ptr<DataLoader> val_loader_;
  Tensor best_params_, best_stats_;
  bool checked_ = false;   // this epoch's first non-finite batch had its inputs checked
  std::string nonfinite_;  // what that check found ("" : the inputs were finite)
};
}  // namespace

History Model::fit(const Dataset& all_train, const FitOptions& options, const Dataset* given_validation) {
  const Call call(*this, "fit", call_threads(/*fresh=*/true));
  const detail::PrecisionScope precision_scope(precision_);
  FitData data;
  split_for_validation(all_train, options, given_validation, data);
  EMBER_CHECK(options.epochs >= 1, ArgumentError, "fit: epochs must be >= 1, got " + std::to_string(options.epochs));
  EMBER_CHECK(options.initial_epoch >= 0 && options.initial_epoch <= options.epochs, ArgumentError,
              "fit: initial_epoch " + std::to_string(options.initial_epoch) + " is outside 0.." +
                  std::to_string(options.epochs));
  EMBER_CHECK(optimizer_ != nullptr, Error, "fit: compile() the model with an optimizer first");
  if (!built()) {
    const Shape sample = data.train.sample_shape();
    build_model(topo_->graph ? nullptr : &sample, options.seed);
  }
  // The inputs in the model's order (named ones matched by name), checked.
  const Dataset train = arranged(data.train, "fit");
  std::optional<Dataset> arranged_validation;
  if (data.validation) arranged_validation = arranged(*data.validation, "fit (validation data)");
  // On a GPU the dataset moves to the device once and batches are gathered there.
  DataLoader loader(train, {.batch_size = options.batch_size,
                            .shuffle = options.shuffle,
                            .seed = options.seed,
                            .device = device_,
                            .defer_device_gather = options.cuda_graphs && device_.is_cuda() && !options.transform});
  ModelTraining target(*this, options);
  return fit_loop(loader, options, arranged_validation ? &*arranged_validation : nullptr, target, options.verbose > 0);
}

EvalResult Model::evaluate(const Dataset& data, int64_t batch_size) {
  const Call call(*this, "evaluate", call_threads(/*fresh=*/true));
  const detail::PrecisionScope precision_scope(precision_);
  require_built("evaluate");
  const Dataset arranged_data = arranged(data, "evaluate");
  DataLoader loader(arranged_data, {.batch_size = batch_size, .shuffle = false, .device = device_});
  return evaluate(loader);
}

EvalResult Model::evaluate(DataLoader& loader) {
  const Call call(*this, "evaluate", call_threads(/*fresh=*/true));
  const detail::PrecisionScope precision_scope(precision_);
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
  EMBER_CHECK(
      topo_->outputs.size() <= 1, ArgumentError,
      "predict: the model has " + std::to_string(topo_->outputs.size()) + " outputs: predict_outputs() gives each");
  return predict_of({&x, 1}, batch_size)[0];
}

Tensor Model::predict(const std::vector<Tensor>& xs, int64_t batch_size) {
  EMBER_CHECK(
      topo_->outputs.size() <= 1, ArgumentError,
      "predict: the model has " + std::to_string(topo_->outputs.size()) + " outputs: predict_outputs() gives each");
  return predict_of(xs, batch_size)[0];
}

std::vector<Tensor> Model::predict_outputs(const std::vector<Tensor>& xs, int64_t batch_size) {
  return predict_of(xs, batch_size);
}

std::vector<Tensor> Model::predict_of(std::span<const Tensor> given, int64_t batch_size) {
  require_built("predict");
  // Work too small to split runs on this thread alone (set_num_threads).
  // (Per forward pass: a batch runs in chunks of at most batch_size rows.)
  const bool small = device_.is_cpu() && !given.empty() && given[0].rank() > 0 &&
                     std::min(given[0].dim(0), batch_size) * macs_per_sample() < kSplitMacs;
  const Call call(*this, "predict", small ? 1 : call_threads());
  const detail::PrecisionScope precision_scope(precision_);
  EMBER_CHECK(batch_size > 0, ArgumentError, "predict: batch size must be > 0");
  EMBER_CHECK(given.size() == topo_->input_shapes.size(), ArgumentError,
              "predict: the model takes " + std::to_string(topo_->input_shapes.size()) + " inputs, given " +
                  std::to_string(given.size()));
  // Row-major copies on the model's device where needed (views: no copy otherwise).
  std::vector<Tensor> xs;
  for (size_t k = 0; k < given.size(); ++k) {
    const Tensor& x = given[k];
    const Shape& in = topo_->input_shapes[k];
    // The whole sample shape: a view of other samples as the model's shape would be silent nonsense.
    EMBER_CHECK((x.dtype() == DType::F32 || x.dtype() == DType::I32) && x.rank() == in.rank() + 1 &&
                    x.shape().without_batch() == in && x.dim(0) == given[0].dim(0),
                ShapeError,
                "predict: expects f32 input (i32 ids for an Embedding)" +
                    (given.size() == 1 ? std::string() : " '" + topo_->input_names[k] + "'") + " (" +
                    std::to_string(given[0].dim(0)) + ", ...) with samples " + in.str() + ", given " + x.str());
    Tensor rm = x.layout() == Layout::RowMajor ? x : x.to_layout(Layout::RowMajor);
    xs.push_back(rm.device() == device_ ? rm : rm.to(device_));
  }
  const int64_t n = given[0].dim(0);
  const detail::MicroBatches::ViewsDropper drop{*batches_};  // the slices view the caller's inputs: not kept after
  std::vector<Tensor> outs;
  for (const Shape& s : output_shapes()) outs.push_back(Tensor::empty(s.with_batch(n), DType::F32, Device::cpu()));
  // CPU micro-batches (set_cpu_micro_batch): a batch larger than a slice runs slice by slice.
  const int64_t first = std::min(batch_size, n);
  const int64_t step = std::min(
      batch_size, batches_->rows_for(batches_->inputs(xs, 0, first), false, device_, *topo_, arena_->params.numel()));
  for (int64_t i = 0; i < n; i += step) {
    const int64_t b = std::min(step, n - i);
    run_layers(batches_->inputs(xs, i, b), false, 0, topo_->layers.size(), "predict", true);
    for (size_t k = 0; k < outs.size(); ++k)  // device to host when the model is on a GPU
      outs[k].rows(i, b).copy_from(output(k));
  }
  return outs;
}

}  // namespace ember
