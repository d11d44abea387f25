// The data-parallel step and DataParallelStrategy (see data_parallel.h). On GPUs nothing in a
// step waits for the device except NCCL's bounded wait for the previous step's all-reduce
// (nccl_communicator.h), so the host stays at most one step ahead.
#include "data_parallel.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <thread>

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
  std::vector<Tensor*> grads;
  std::vector<Tensor> stats(replicas.size());  // views of each model's averaged region, kept for the call
  std::vector<Tensor*> stat_ptrs;
  for (size_t i = 0; i < replicas.size(); ++i) {
    grads.push_back(&replicas[i]->grads());
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
  gradients.all_reduce_sum(grads);  // host transports: done here; NCCL: queued on the GPUs
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
  for (size_t i = 0; i < metrics.size(); ++i) t.f32()[2 + i] = static_cast<float>(metrics[i]);
  comm.all_reduce_sum(t);
  MetricSums::Values total;
  total.loss_sum = t.f32()[0];
  // eval_result reads each metric from its slot or the fused count: give it both.
  for (size_t i = 0; i < metrics.size(); ++i) {
    total.metrics.push_back(t.f32()[2 + i]);
    if (model.num_outputs() == 1 && model.metrics()[i]->fused_with(model.loss()))
      total.correct = static_cast<int64_t>(t.f32()[2 + i]);
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
  const auto rows_of = [](const Tensor& t, int64_t begin, int64_t n) {
    const Shape sample = t.shape().without_batch();
    return t.view(begin * sample.numel(), sample.with_batch(n));
  };
  for (size_t i = 0; i < local; ++i) {  // near-equal contiguous shards, as fit's loaders cut a batch
    const int64_t lo = rows * static_cast<int64_t>(i) / static_cast<int64_t>(local);
    const int64_t hi = rows * static_cast<int64_t>(i + 1) / static_cast<int64_t>(local);
    const Device d = config_.devices[i];
    shards[i].inputs.clear();
    for (const Tensor& x : xs) {
      const Tensor part = rows_of(x, lo, hi - lo);
      shards[i].inputs.push_back(part.device() == d ? part : part.to(d));
    }
    shards[i].targets.clear();
    for (const Tensor& y : ys) {
      const Tensor part = rows_of(y, lo, hi - lo);
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

History DataParallelStrategy::fit(const Dataset& all_train, const FitOptions& options,
                                  const Dataset* given_validation) {
  EMBER_CHECK(!replicas_.empty(), Error, "strategy: build() first");
  FitData data;
  split_for_validation(all_train, options, given_validation, data);
  // The inputs in the model's order (named ones matched by name), checked.
  const Dataset train = replicas_[0]->arranged(data.train, "fit");
  std::optional<Dataset> arranged_validation;
  if (data.validation) arranged_validation = replicas_[0]->arranged(*data.validation, "fit (validation data)");
  const Dataset* validation = arranged_validation ? &*arranged_validation : nullptr;
  Communicator& comm = *gradients_;
  const int members = comm.size();
  EMBER_CHECK(options.batch_size % members == 0, ArgumentError,
              config_.kind + ": the global batch size " + std::to_string(options.batch_size) +
                  " does not split evenly over " + std::to_string(members) + " " + config_.unit);
  stats_ = {};
  // One loader per local replica: each builds its shard on its replica's device (on a GPU from
  // the data set held there).
  const size_t local = replicas_.size();
  std::vector<std::unique_ptr<DataLoader>> loaders;
  std::vector<MetricSums> sums;
  for (size_t i = 0; i < local; ++i) {
    const Device d = config_.devices[i];
    loaders.push_back(std::make_unique<DataLoader>(train, DataLoaderOptions{.batch_size = options.batch_size,
                                                                            .shuffle = options.shuffle,
                                                                            .seed = options.seed,
                                                                            .num_shards = members,
                                                                            .shard = comm.rank() + static_cast<int>(i),
                                                                            .device = d}));
    sums.push_back(replicas_[i]->make_sums(d));
  }
  // The gradient all-reduces' time: where the gradients go over the world itself (MultiWorker on
  // CPUs), the world's metric and evaluation reductions are taken out again (`not_gradients`).
  const double busy0 = comm.busy_seconds();
  double not_gradients = 0;
  auto on_world = [&](auto&& fn) {
    const double b = comm.busy_seconds();
    auto r = fn();
    if (config_.world.get() == &comm) not_gradients += comm.busy_seconds() - b;
    return r;
  };
  int64_t step = 0;
  std::vector<Batch> shards(local);
  std::unique_ptr<ReplicaWatchdog> watchdog;
  if (config_.replica_timeout.count() > 0)
    watchdog = std::make_unique<ReplicaWatchdog>(config_.kind, config_.replica_timeout);
  FitLoopHooks hooks;
  hooks.metric_names = replicas_[0]->metric_names();
  hooks.begin_epoch = [&](int epoch, int64_t first_batch) {
    for (size_t i = 1; i < local; ++i) loaders[i]->start_epoch(epoch, first_batch);
    for (auto& s : sums) s.reset();
  };
  hooks.step = [&](const Batch& b0) {
    const auto t0 = std::chrono::steady_clock::now();
    shards[0] = b0;
    for (size_t i = 1; i < local; ++i)
      EMBER_CHECK(loaders[i]->next(shards[i]), Error,
                  config_.kind + ": replica " + std::to_string(i) + "'s loader ran out before replica 0's");
    if (config_.world) config_.world->set_step(step);
    try {
      data_parallel_step(replicas_, config_.devices, shards, b0.global_size, sums, comm, step, fault, watchdog.get());
    } catch (const std::exception& e) {
      if (config_.world) config_.world->abort("step " + std::to_string(step) + ": " + e.what());  // ends every rank
      throw;
    }
    ++step;
    int64_t rows = 0;
    for (const Batch& s : shards) rows += s.rows();
    stats_.step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return StepResult{.metrics = {}, .samples = rows};
  };
  hooks.epoch_totals = [&] {
    StepResult t;
    t.metrics.assign(hooks.metric_names.size(), 0.0);
    for (size_t r = 0; r < sums.size(); ++r) {
      const MetricSums::Values v = sums[r].read();  // waits for that device's queued work
      t.loss_sum += v.loss_sum;
      const std::vector<double> m = replicas_[r]->metric_sums(v);
      for (size_t i = 0; i < m.size(); ++i) t.metrics[i] += m[i];
      if (!v.finite() && (t.first_nonfinite < 0 || v.finite_batches < t.first_nonfinite))
        t.first_nonfinite = v.finite_batches;  // the earliest replica to see it
    }
    comm.wait();
    stats_.allreduce_seconds = comm.busy_seconds() - busy0 - not_gradients;
    return t;
  };
  if (config_.world)
    hooks.reduce_epoch = [&](const StepResult& mine) {
      // {loss sum, samples, metric sums...} over the world (f32: counts <= 2^24 stay exact).
      Tensor t = Tensor::empty(Shape{2 + static_cast<int64_t>(mine.metrics.size())}, DType::F32, Device::cpu());
      t.f32()[0] = static_cast<float>(mine.loss_sum);
      t.f32()[1] = static_cast<float>(mine.samples);
      for (size_t i = 0; i < mine.metrics.size(); ++i) t.f32()[2 + i] = static_cast<float>(mine.metrics[i]);
      on_world([&] {
        config_.world->all_reduce_sum(t);
        return 0;
      });
      StepResult total;
      total.loss_sum = t.f32()[0];
      total.samples = static_cast<int64_t>(t.f32()[1]);
      for (size_t i = 0; i < mine.metrics.size(); ++i) total.metrics.push_back(t.f32()[2 + i]);
      return total;
    };
  hooks.evaluate = [&](const Dataset& d, int64_t bs) { return on_world([&] { return evaluate(d, bs); }); };
  hooks.set_learning_rate = [&](float lr) {
    for (auto& m : replicas_) m->optimizer()->set_learning_rate(lr);
  };
  hooks.learning_rate = [&] { return replicas_[0]->optimizer()->learning_rate(); };
  hooks.iterations = [&] { return replicas_[0]->optimizer()->iterations(); };
  // Early stopping: the replicas agree, so replica 0's weights are every replica's; every rank
  // sees the same val_loss (reduced over the world) and decides alike.
  Tensor best_params, best_stats;  // parameters and moving statistics (not the step counters)
  hooks.keep_best_weights = [&] {
    best_params = replicas_[0]->params().clone();
    best_stats = replicas_[0]->averaged_state().clone();
  };
  hooks.restore_best_weights = [&] {
    for (auto& m : replicas_) {
      m->params().copy_from(best_params);
      m->averaged_state().copy_from(best_stats);
    }
  };
  hooks.totals_on_host =
      std::all_of(config_.devices.begin(), config_.devices.end(), [](const Device& d) { return d.is_cpu(); });
  Tensor flag = Tensor::empty(Shape{1}, DType::F32, Device::cpu());  // reused every step
  if (config_.world)  // every rank stops at the same step: one flag summed over the world per step
    hooks.agree_stop = [&](bool mine) {
      flag.f32()[0] = mine ? 1.0f : 0.0f;
      on_world([&] {
        config_.world->all_reduce_sum(flag);
        return 0;
      });
      return flag.f32()[0] > 0.0f;
    };
  hooks.print = options.verbose > 0 && is_chief();
  try {
    return fit_loop(*loaders[0], options, validation, hooks);
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
