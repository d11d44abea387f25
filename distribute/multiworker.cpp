// MultiWorker: one replica per MPI process. Rank and size come from MPI (so mpirun, srun and
// hostfiles all work); every rank reads its own shard of each global batch; gradients are
// summed with MPI_Allreduce (weighted by shard size, so the sum is the global mean); only rank
// 0 prints; epoch metrics and evaluation are reduced across ranks.
#include "distribute/mpi_communicator.h"
#include "distribute/replica_step.h"
#include "distribute/strategy.h"

namespace ember {

namespace {

class MultiWorkerStrategy : public Strategy {
 public:
  explicit MultiWorkerStrategy(std::chrono::milliseconds timeout) : comm_(detail::make_mpi_communicator(timeout)) {}
  std::string name() const override { return "multiworker (" + std::to_string(comm_->size()) + " ranks, MPI)"; }
  int num_replicas() const override { return comm_->size(); }
  int rank() const override { return comm_->rank(); }

  void build(const ModelRecipe& recipe) override {
    detail::require_cpu_replicas_for(recipe, "multiworker");
    model_ = std::make_unique<Sequential>();
    recipe.add_layers(*model_);
    model_->build(recipe.input_shape, recipe.seed);
    model_->compile(recipe.make_optimizer());
    comm_->broadcast(model_->params(), 0);
  }

  History fit(const Dataset& train, const FitOptions& options, const Dataset* validation) override {
    EMBER_CHECK(model_ != nullptr, Error, "strategy: build() first");
    const int n = comm_->size();
    EMBER_CHECK(options.batch_size % n == 0, ArgumentError,
                "multiworker: the global batch size " + std::to_string(options.batch_size) +
                    " does not split evenly over " + std::to_string(n) + " ranks");
    stats_ = {};
    DataLoader loader(train, {.batch_size = options.batch_size, .shuffle = options.shuffle, .seed = options.seed,
                              .num_shards = n, .shard = comm_->rank()});
    int64_t step = 0;
    FitLoopHooks hooks;
    hooks.step = [&](const Batch& b) {
      const auto t0 = std::chrono::steady_clock::now();
      comm_->set_step(step);
      StepResult r;
      try {
        maybe_fail(comm_->rank(), step);
        r = detail::replica_step(*model_, *comm_, b.x, b.y, b.global_size, &stats_.allreduce_seconds);
      } catch (const std::exception& e) {
        comm_->abort("step " + std::to_string(step) + ": " + e.what());  // ends every rank
        throw;
      }
      ++step;
      stats_.step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return r;
    };
    hooks.reduce_epoch = [&](const StepResult& local) {
      Tensor t = Tensor::empty(Shape{3});
      t.f32()[0] = static_cast<float>(local.loss_sum);
      t.f32()[1] = static_cast<float>(local.correct);
      t.f32()[2] = static_cast<float>(local.samples);
      comm_->all_reduce_sum(t);
      return StepResult{t.f32()[0], static_cast<int64_t>(t.f32()[1]), static_cast<int64_t>(t.f32()[2])};
    };
    hooks.evaluate = [&](const Dataset& d, int64_t bs) { return evaluate(d, bs); };
    hooks.print = options.verbose > 0 && is_chief();
    return fit_loop(loader, options, validation, hooks);
  }

  EvalResult evaluate(const Dataset& data, int64_t batch_size) override {
    return detail::sharded_evaluate(model(), *comm_, data, batch_size);
  }
  Sequential& model() override {
    EMBER_CHECK(model_ != nullptr, Error, "strategy: build() first");
    return *model_;
  }

 private:
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<Sequential> model_;
};

}  // namespace

std::unique_ptr<Strategy> make_multiworker_strategy(std::chrono::milliseconds timeout) {
  return std::make_unique<MultiWorkerStrategy>(timeout);
}

}  // namespace ember
