// The data-parallel step and DataParallelStrategy (see data_parallel.h). On GPUs nothing in a
// step waits for the device except NCCL's bounded wait for the previous step's all-reduce
// (nccl_communicator.h), so the host stays at most one step ahead.
#include "data_parallel.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>
#include <type_traits>

#include "../core/cuda_module.h"

namespace ember::detail {

std::unique_ptr<Model> build_replica(const ModelRecipe& recipe, Device device) {
  EMBER_CHECK(static_cast<bool>(recipe.make_model) != static_cast<bool>(recipe.add_layers), ArgumentError,
              "ModelRecipe: give make_model or add_layers (one of them)");
  std::unique_ptr<Model> m;
  if (recipe.make_model) {
    m = recipe.make_model();
    EMBER_CHECK(m != nullptr, ArgumentError, "ModelRecipe: make_model returned no model");
  } else {
    auto seq = std::make_unique<Sequential>();
    recipe.add_layers(*seq);
    m = std::move(seq);
  }
  // A graph model knows its inputs' shapes: input_shape, when given, is checked against them.
  const bool own_shapes = m->is_graph() && recipe.input_shape.rank() == 0;
  if (!m->built() && own_shapes)
    m->build(recipe.seed);
  else if (!m->built())
    m->build(recipe.input_shape, recipe.seed);
  else if (!own_shapes)  // made with its weights (load_model): it must fit the data
    EMBER_CHECK(
        m->num_inputs() == 1 && m->input_shape() == recipe.input_shape, ShapeError,
        m->num_inputs() == 1
            ? "the model takes samples " + m->input_shape().str() + " but the data's are " + recipe.input_shape.str()
            : "the model has " + std::to_string(m->num_inputs()) + " inputs: leave ModelRecipe::input_shape empty");
  EMBER_CHECK(!recipe.make_outputs || (!recipe.make_loss && recipe.metrics.empty()), ArgumentError,
              "ModelRecipe: give make_outputs or make_loss/metrics (not both)");
  EMBER_CHECK(m->num_outputs() <= 1 || recipe.make_outputs, ArgumentError,
              "ModelRecipe: a model of " + std::to_string(m->num_outputs()) +
                  " outputs needs make_outputs (a loss per output)");
  if (recipe.make_outputs)
    m->compile(recipe.make_optimizer(), recipe.make_outputs());
  else if (recipe.make_loss)
    m->compile(recipe.make_optimizer(), recipe.make_loss(), recipe.metrics);
  else if (!recipe.metrics.empty())
    m->compile(recipe.make_optimizer(), std::make_unique<losses::SparseCategoricalCrossentropy>(), recipe.metrics);
  else
    m->compile(recipe.make_optimizer());
  for (const auto& [param, decay] : recipe.weight_decay) m->set_weight_decay(param, decay);
  m->to(device);
  return m;
}

void weight_gradients(Tensor& grads, int64_t shard, int64_t global) {
  if (shard == 0) {
    grads.fill(0.0f);
    return;
  }
  const float w = static_cast<float>(shard) / static_cast<float>(global);
  if (grads.device().is_cuda()) {
    require_cuda_module("GPU gradients").scale(grads, w);
    return;
  }
  float* g = grads.f32();
  for (int64_t i = 0; i < grads.numel(); ++i) g[i] *= w;
}

namespace {
void maybe_fail(const FaultPlan& fault, int member, int64_t step) {
  if (member != fault.member || step != fault.step) return;
  if (fault.hang) std::this_thread::sleep_for(std::chrono::hours(1));
  throw Error("injected fault in replica " + std::to_string(member) + " at step " + std::to_string(step));
}
}  // namespace

void compute_replica_gradients(std::span<const std::unique_ptr<Model>> replicas, std::span<const Device> devices,
                               std::span<const Batch> shards, int64_t global, std::span<MetricSums> sums,
                               Communicator& gradients, int64_t step, const FaultPlan& fault,
                               ReplicaWatchdog* watchdog) {
  gradients.set_step(step);
  for (size_t i = 0; i < replicas.size(); ++i) {
    const int member = gradients.rank() + static_cast<int>(i);
    Model& m = *replicas[i];
    try {
      if (watchdog) watchdog->arm(member, devices[i], step);
      maybe_fail(fault, member, step);
      const int64_t rows = shards[i].rows();
      if (rows > 0) m.compute_gradients(shards[i].inputs, shards[i].targets, sums[i]);
      weight_gradients(m.grads(), rows, global);
      if (watchdog) watchdog->disarm();
    } catch (const std::exception& e) {
      if (watchdog) watchdog->disarm();
      throw Error("replica " + std::to_string(member) + " (" + devices[i].str() + ") failed at step " +
                  std::to_string(step) + ": " + e.what());
    }
  }
}

void all_reduce_replicas(std::span<const std::unique_ptr<Model>> replicas, std::span<const int64_t> rows,
                         int64_t global, Communicator& gradients) {
  // The trainable layers' gradients (frozen layers' are zero on every replica): a call per part.
  std::vector<std::vector<Tensor>> parts(replicas.size());
  std::vector<Tensor> stats(replicas.size());  // views of each model's averaged region, kept for the call
  std::vector<Tensor*> stat_ptrs;
  for (size_t i = 0; i < replicas.size(); ++i) {
    parts[i] = replicas[i]->trainable_gradients();
    EMBER_CHECK(parts[i].size() == parts[0].size(), Error,
                "all_reduce: the replicas freeze different layers (freeze them in the recipe)");
    // Moving statistics (BatchNormalization's): each replica updated its own from its shard; the
    // same weighted sum as the gradients' makes them their shard-weighted mean on every replica
    // (Keras' MEAN aggregation). Weighted here, just before the sum, so they are never left
    // scaled between the step's parts.
    if (replicas[i]->num_non_trainable() > 0) {
      stats[i] = replicas[i]->averaged_state();
      weight_gradients(stats[i], rows[i], global);  // an empty shard adds nothing
      stat_ptrs.push_back(&stats[i]);
    }
  }
  for (size_t k = 0; k < parts[0].size(); ++k) {  // host transports: done here; NCCL: queued on the GPUs
    std::vector<Tensor*> grads;
    for (auto& p : parts) grads.push_back(&p[k]);
    gradients.all_reduce_sum(grads);
  }
  if (!stat_ptrs.empty()) gradients.all_reduce_sum(stat_ptrs);
}

void data_parallel_step(std::span<const std::unique_ptr<Model>> replicas, std::span<const Device> devices,
                        std::span<const Batch> shards, int64_t global, std::span<MetricSums> sums,
                        Communicator& gradients, int64_t step, const FaultPlan& fault, ReplicaWatchdog* watchdog) {
  compute_replica_gradients(replicas, devices, shards, global, sums, gradients, step, fault, watchdog);
  std::vector<int64_t> rows;
  for (const Batch& b : shards) rows.push_back(b.rows());
  all_reduce_replicas(replicas, rows, global, gradients);
  for (const auto& m : replicas) m->apply_gradients();
}

EvalResult sharded_evaluate(Model& model, Communicator& comm, const Dataset& given, int64_t batch_size) {
  const Dataset data = model.arranged(given, "evaluate");
  DataLoader loader(data, {.batch_size = std::max<int64_t>(batch_size, comm.size()),
                           .shuffle = false,
                           .seed = 0,
                           .num_shards = comm.size(),
                           .shard = comm.rank(),
                           .device = model.device()});
  loader.start_epoch(0);
  Batch b;
  MetricSums sums = model.make_sums();
  int64_t seen = 0;
  while (loader.next(b)) {
    const int64_t n = b.rows();
    if (n == 0) continue;
    model.evaluate_batch(b.inputs, b.targets, sums);
    seen += n;
  }
  const MetricSums::Values v = sums.read();
  const std::vector<double> metrics = model.metric_sums(v);
  // {loss sum, sample count, metric sums...} summed over the members, in f32 (the transports'
  // type; counts <= 2^24 stay exact).
  Tensor t = Tensor::empty(Shape{2 + static_cast<int64_t>(metrics.size())}, DType::F32, Device::cpu());
  t.f32()[0] = static_cast<float>(v.loss_sum);
  t.f32()[1] = static_cast<float>(seen);
  // A metric the loss counts in its pass travels as the raw count (a sequence's: per step), which
  // eval_result turns into the metric as a single model does.
  const auto fused = [&](size_t i) { return model.num_outputs() == 1 && model.metrics()[i]->fused_with(model.loss()); };
  for (size_t i = 0; i < metrics.size(); ++i)
    t.f32()[2 + i] = static_cast<float>(fused(i) ? static_cast<double>(v.correct) : metrics[i]);
  comm.all_reduce_sum(t);
  MetricSums::Values total;
  total.loss_sum = t.f32()[0];
  // eval_result reads each metric from its slot or the fused count: give it both.
  for (size_t i = 0; i < metrics.size(); ++i) {
    total.metrics.push_back(t.f32()[2 + i]);
    if (fused(i)) total.correct = static_cast<int64_t>(t.f32()[2 + i]);
  }
  return model.eval_result(total, static_cast<int64_t>(t.f32()[1]));
}

DataParallelStrategy::DataParallelStrategy(DataParallelConfig config) : config_(std::move(config)) {}

DataParallelStrategy::~DataParallelStrategy() = default;

std::string DataParallelStrategy::name() const {
  if (config_.world) {
    const bool nccl = gradients_ && gradients_ != config_.world;
    return config_.kind + " (" + std::to_string(config_.world->size()) + " ranks, " + (nccl ? "NCCL over " : "") +
           config_.world->name() + ")";
  }
  const auto& d = config_.devices;
  if (std::all_of(d.begin(), d.end(), [](const Device& x) { return x.is_cpu(); }))
    return config_.kind + " (" + std::to_string(d.size()) + " cpu replicas)";
  std::string list;
  for (const Device& x : d) list += (list.empty() ? "" : ",") + x.str();
  // NCCL, or the host sum when a GPU holds several replicas (known once built).
  return config_.kind + " (" + std::to_string(d.size()) + " replicas on " + list + ", " +
         (gradients_ ? gradients_->name() : std::string("NCCL")) + ")";
}

int DataParallelStrategy::num_replicas() const {
  if (gradients_) return gradients_->size();
  return config_.world ? config_.world->size() : static_cast<int>(config_.devices.size());
}

void DataParallelStrategy::build(const ModelRecipe& recipe) {
  replicas_.clear();
  loop_sums_.clear();  // the custom loop's state belongs to the replicas it was made for
  loop_rows_.clear();
  loop_step_ = 0;
  gradients_ = config_.connect(recipe, config_.devices);
  for (size_t i = 0; i < config_.devices.size(); ++i) {
    replicas_.push_back(build_replica(recipe, config_.devices[i]));
    // Random layers (Dropout) draw per replica: replicas do not drop the same units.
    replicas_.back()->set_random_stream(static_cast<uint64_t>(gradients_->rank()) + i);
  }
  // Every replica is built from the same seed, so they already agree; the broadcast makes it
  // so whatever the recipe does (the non-trainable state too).
  std::vector<Tensor*> params, state;
  for (auto& m : replicas_) {
    params.push_back(&m->params());
    if (m->state().numel() > 0) state.push_back(&m->state());
  }
  gradients_->broadcast(params, 0);
  if (!state.empty()) gradients_->broadcast(state, 0);
  gradients_->wait();
}

Model& DataParallelStrategy::model() {
  EMBER_CHECK(!replicas_.empty(), Error, "strategy: build() first");
  return *replicas_[0];
}

TrainingState DataParallelStrategy::load(const std::string& path) {
  TrainingState st = model().load(path);
  for (size_t r = 1; r < replicas_.size(); ++r) replicas_[r]->load(path);
  return st;
}

EvalResult DataParallelStrategy::evaluate(const Dataset& data, int64_t batch_size) {
  if (config_.world) return sharded_evaluate(model(), *config_.world, data, batch_size);
  return model().evaluate(data, batch_size);
}

float DataParallelStrategy::compute_gradients(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys) {
  EMBER_CHECK(!replicas_.empty(), Error, "strategy: build() first");
  EMBER_CHECK(!xs.empty() && !ys.empty(), ArgumentError,
              config_.kind + ": compute_gradients without inputs or targets");
  for (const std::vector<Tensor>* list : {&xs, &ys})
    for (const Tensor& t : *list)
      EMBER_CHECK(t.rank() >= 1 && t.dim(0) == xs[0].dim(0) && t.layout() == Layout::RowMajor, ShapeError,
                  config_.kind + ": compute_gradients takes row-major inputs and targets of one batch (" +
                      std::to_string(xs[0].rank() >= 1 ? xs[0].dim(0) : 0) + " rows), got " + t.str());
  const int64_t rows = xs[0].dim(0);
  int64_t global = rows;
  if (config_.world) {  // the global batch: every process's rows
    Tensor t = Tensor::empty(Shape{1}, DType::F32, Device::cpu());
    t.f32()[0] = static_cast<float>(rows);
    config_.world->all_reduce_sum(t);
    global = static_cast<int64_t>(t.f32()[0]);
  }
  const size_t local = replicas_.size();
  std::vector<Batch> shards(local);
  if (loop_sums_.size() != local) {
    loop_sums_.clear();
    for (size_t i = 0; i < local; ++i) loop_sums_.push_back(replicas_[i]->make_sums(config_.devices[i]));
  }
  for (size_t i = 0; i < local; ++i) {  // near-equal contiguous shards, as fit's loaders cut a batch
    const int64_t lo = rows * static_cast<int64_t>(i) / static_cast<int64_t>(local);
    const int64_t hi = rows * static_cast<int64_t>(i + 1) / static_cast<int64_t>(local);
    const Device d = config_.devices[i];
    shards[i].inputs.clear();
    for (const Tensor& x : xs) {
      const Tensor part = x.rows(lo, hi - lo);
      shards[i].inputs.push_back(part.device() == d ? part : part.to(d));
    }
    shards[i].targets.clear();
    for (const Tensor& y : ys) {
      const Tensor part = y.rows(lo, hi - lo);
      shards[i].targets.push_back(part.device() == d ? part : part.to(d));
    }
    loop_sums_[i].reset();
  }
  if (config_.world) config_.world->set_step(loop_step_);
  if (!loop_watchdog_ && config_.replica_timeout.count() > 0)
    loop_watchdog_ = std::make_unique<ReplicaWatchdog>(config_.kind, config_.replica_timeout);
  try {
    compute_replica_gradients(replicas_, config_.devices, shards, global, loop_sums_, *gradients_, loop_step_, fault,
                              loop_watchdog_.get());
  } catch (const std::exception& e) {  // as fit's step: a failure ends every rank now
    if (config_.world) config_.world->abort("step " + std::to_string(loop_step_) + ": " + e.what());
    throw;
  }
  loop_rows_.clear();
  for (const Batch& b : shards) loop_rows_.push_back(b.rows());
  loop_global_ = global;
  double loss = 0;
  for (const MetricSums& s : loop_sums_) loss += s.read().loss_sum;  // waits for GPU replicas
  return static_cast<float>(loss / static_cast<double>(std::max<int64_t>(rows, 1)));
}

void DataParallelStrategy::all_reduce_gradients() {
  EMBER_CHECK(!replicas_.empty(), Error, "strategy: build() first");
  EMBER_CHECK(loop_rows_.size() == replicas_.size(), Error,
              config_.kind + ": all_reduce_gradients() without a compute_gradients() before it");
  all_reduce_replicas(replicas_, loop_rows_, loop_global_, *gradients_);
  loop_rows_.clear();  // reduced once per computed step
}

void DataParallelStrategy::apply_gradients() {
  EMBER_CHECK(!replicas_.empty(), Error, "strategy: build() first");
  for (const auto& m : replicas_) m->apply_gradients();
  ++loop_step_;
}

// The replicas of this process (and, through `world`, every rank's) as fit_loop's target: one
// loader and one set of sums per local replica; a step feeds every replica its shard and runs the
// data-parallel step; the epoch's sums are read from every replica and reduced over the world.
class DataParallelStrategy::Training final : public TrainingTarget {
 public:
  Training(DataParallelStrategy& s, const Dataset& train, const FitOptions& options)
      : s_(s),
        comm_(*s.gradients_),
        busy0_(comm_.busy_seconds()),
        flag_(Tensor::empty(Shape{1}, DType::F32, Device::cpu())) {
    // One loader per local replica: each builds its shard on its replica's device (on a GPU from
    // the data set held there).
    for (size_t i = 0; i < s.replicas_.size(); ++i) {
      const Device d = s.config_.devices[i];
      loaders_.push_back(
          std::make_unique<DataLoader>(train, DataLoaderOptions{.batch_size = options.batch_size,
                                                                .shuffle = options.shuffle,
                                                                .seed = options.seed,
                                                                .num_shards = comm_.size(),
                                                                .shard = comm_.rank() + static_cast<int>(i),
                                                                .device = d}));
      sums_.push_back(s.replicas_[i]->make_sums(d));
    }
    shards_.resize(s.replicas_.size());
    num_metrics_ = s.replicas_[0]->metric_names().size();
    if (s.config_.replica_timeout.count() > 0)
      watchdog_ = std::make_unique<ReplicaWatchdog>(s.config_.kind, s.config_.replica_timeout);
  }
  DataLoader& loader() { return *loaders_[0]; }

  std::vector<std::string> metric_names() const override { return s_.replicas_[0]->metric_names(); }
  void begin_epoch(int epoch, int64_t first_batch) override {
    for (size_t i = 1; i < loaders_.size(); ++i) loaders_[i]->start_epoch(epoch, first_batch);
    for (auto& sums : sums_) sums.reset();
  }
  int64_t step(const Batch& b0) override {
    const auto t0 = std::chrono::steady_clock::now();
    shards_[0] = b0;
    for (size_t i = 1; i < loaders_.size(); ++i)
      EMBER_CHECK(loaders_[i]->next(shards_[i]), Error,
                  s_.config_.kind + ": replica " + std::to_string(i) + "'s loader ran out before replica 0's");
    if (s_.config_.world) s_.config_.world->set_step(step_);
    try {
      data_parallel_step(s_.replicas_, s_.config_.devices, shards_, b0.global_size, sums_, comm_, step_, s_.fault,
                         watchdog_.get());
    } catch (const std::exception& e) {
      if (s_.config_.world)
        s_.config_.world->abort("step " + std::to_string(step_) + ": " + e.what());  // ends every rank
      throw;
    }
    ++step_;
    int64_t rows = 0;
    for (const Batch& shard : shards_) rows += shard.rows();
    s_.stats_.step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return rows;
  }
  StepResult epoch_totals() override {
    StepResult t;
    t.metrics.assign(num_metrics_, 0.0);
    for (size_t r = 0; r < sums_.size(); ++r) {
      const MetricSums::Values v = sums_[r].read();  // waits for that device's queued work
      t.loss_sum += v.loss_sum;
      const std::vector<double> m = s_.replicas_[r]->metric_sums(v);
      for (size_t i = 0; i < m.size(); ++i) t.metrics[i] += m[i];
      if (!v.finite() && (t.first_nonfinite < 0 || v.finite_batches < t.first_nonfinite))
        t.first_nonfinite = v.finite_batches;  // the earliest replica to see it
    }
    comm_.wait();
    s_.stats_.allreduce_seconds = comm_.busy_seconds() - busy0_ - not_gradients_;
    return t;
  }
  bool totals_on_host() const override {
    return std::all_of(s_.config_.devices.begin(), s_.config_.devices.end(),
                       [](const Device& d) { return d.is_cpu(); });
  }
  StepResult reduce_epoch(const StepResult& mine) override {
    if (!s_.config_.world) return mine;
    // {loss sum, samples, metric sums...} over the world (f32: counts <= 2^24 stay exact).
    Tensor t = Tensor::empty(Shape{2 + static_cast<int64_t>(mine.metrics.size())}, DType::F32, Device::cpu());
    t.f32()[0] = static_cast<float>(mine.loss_sum);
    t.f32()[1] = static_cast<float>(mine.samples);
    for (size_t i = 0; i < mine.metrics.size(); ++i) t.f32()[2 + i] = static_cast<float>(mine.metrics[i]);
    on_world([&] {
      s_.config_.world->all_reduce_sum(t);
      return 0;
    });
    StepResult total;
    total.loss_sum = t.f32()[0];
    total.samples = static_cast<int64_t>(t.f32()[1]);
    for (size_t i = 0; i < mine.metrics.size(); ++i) total.metrics.push_back(t.f32()[2 + i]);
    return total;
  }
  EvalResult evaluate(const Dataset& d, int64_t batch_size) override {
    return on_world([&] { return s_.evaluate(d, batch_size); });
  }
  void set_learning_rate(float rate) override {
    for (auto& m : s_.replicas_) m->optimizer()->set_learning_rate(rate);
  }
  float learning_rate() const override { return s_.replicas_[0]->optimizer()->learning_rate(); }
  int64_t iterations() const override { return s_.replicas_[0]->optimizer()->iterations(); }
  // The replicas agree, so replica 0's weights are every replica's; every rank sees the same
  // val_loss (reduced over the world) and decides alike. Parameters and moving statistics (not
  // the step counters).
  void keep_best_weights() override {
    best_params_ = s_.replicas_[0]->params().clone();
    best_stats_ = s_.replicas_[0]->averaged_state().clone();
  }
  void restore_best_weights() override {
    for (auto& m : s_.replicas_) {
      m->params().copy_from(best_params_);
      m->averaged_state().copy_from(best_stats_);
    }
  }
  // Every rank stops at the same step: one flag summed over the world per step.
  bool agree_stop(bool mine) override {
    if (!s_.config_.world) return mine;
    flag_.f32()[0] = mine ? 1.0f : 0.0f;
    on_world([&] {
      s_.config_.world->all_reduce_sum(flag_);
      return 0;
    });
    return flag_.f32()[0] > 0.0f;
  }

 private:
  // The gradient all-reduces' time: where the gradients go over the world itself (MultiWorker on
  // CPUs), the world's metric and evaluation reductions are taken out again (`not_gradients_`).
  template <typename F>
  std::invoke_result_t<F&> on_world(F&& fn) {
    const double b = comm_.busy_seconds();
    auto r = fn();
    if (s_.config_.world.get() == &comm_) not_gradients_ += comm_.busy_seconds() - b;
    return r;
  }

  DataParallelStrategy& s_;
  Communicator& comm_;
  const double busy0_;
  double not_gradients_ = 0;
  std::vector<std::unique_ptr<DataLoader>> loaders_;
  std::vector<MetricSums> sums_;
  std::vector<Batch> shards_;
  size_t num_metrics_ = 0;
  std::unique_ptr<ReplicaWatchdog> watchdog_;
  int64_t step_ = 0;
  Tensor best_params_, best_stats_;
  Tensor flag_;  // agree_stop's, reused every step
};

History DataParallelStrategy::fit(const Dataset& all_train, const FitOptions& options,
                                  const Dataset* given_validation) {
  EMBER_CHECK(!replicas_.empty(), Error, "strategy: build() first");
  FitData data;
  split_for_validation(all_train, options, given_validation, data);
  // The inputs in the model's order (named ones matched by name), checked.
  const Dataset train = replicas_[0]->arranged(data.train, "fit");
  std::optional<Dataset> arranged_validation;
  if (data.validation) arranged_validation = replicas_[0]->arranged(*data.validation, "fit (validation data)");
  const int members = gradients_->size();
  EMBER_CHECK(options.batch_size % members == 0, ArgumentError,
              config_.kind + ": the global batch size " + std::to_string(options.batch_size) +
                  " does not split evenly over " + std::to_string(members) + " " + config_.unit);
  stats_ = {};
  Training target(*this, train, options);
  try {
    return fit_loop(target.loader(), options, arranged_validation ? &*arranged_validation : nullptr, target,
                    options.verbose > 0 && is_chief());
  } catch (const NumericalError& e) {
    // Another rank may not have seen it yet: end every rank now, not at its next collective.
    if (config_.world) config_.world->abort(std::string("rank ") + std::to_string(rank()) + ": " + e.what());
    throw;
  }
}

void inject_fault(Strategy& strategy, int member, int64_t step, bool hang) {
  auto* dp = dynamic_cast<DataParallelStrategy*>(&strategy);
  EMBER_CHECK(
      dp != nullptr, ArgumentError,
      "inject_fault: the " + strategy.name() + " strategy has no replicas to fail (use mirrored or multiworker)");
  // With every replica driven by this process's one thread, only a replica deadline notices.
  EMBER_CHECK(!hang || dp->spans_processes() || dp->has_replica_deadline(), ArgumentError,
              "inject_fault: a hang needs another process or a replica deadline to notice it (multiworker, or "
              "mirrored on CPUs)");
  dp->fault = FaultPlan{member, step, hang};
}

}  // namespace ember::detail
