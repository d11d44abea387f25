// MultiWorker: one replica per MPI process. Rank and size come from MPI (so mpirun, srun and
// hostfiles all work); every rank reads its own shard of each global batch; gradients are
// weighted by shard size (so their sum is the global mean) and summed with MPI_Allreduce on
// CPUs, or with NCCL on GPUs (a communicator bootstrapped over MPI; the step then never waits
// for the GPU, as Sequential::fit's); only rank 0 prints; epoch metrics and evaluation are
// reduced across ranks over MPI.
#include <cstdlib>

#include "../core/runtime.h"
#include "mpi_communicator.h"
#include "nccl_communicator.h"
#include "replica_step.h"
#include "strategy.h"

namespace ember {

namespace {

// This process's rank among those on its machine, from the launcher's environment (OpenMPI,
// MPICH/Intel MPI, MVAPICH, Slurm); -1 when none says.
int local_rank() {
  for (const char* var :
       {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"})
    if (const char* v = std::getenv(var)) return std::atoi(v);
  return -1;
}

// The GPU of this rank: the local rank's position among the usable GPUs (round robin).
int pick_gpu(int rank) {
  const CudaStatus& st = cuda_status();
  EMBER_CHECK(st.usable, DeviceError, "multiworker on GPUs: no usable GPU on this machine (" + st.reason + ")");
  const int local = local_rank() >= 0 ? local_rank() : rank;
  const size_t n = st.gpus.size();
  if (const char* size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"))
    EMBER_CHECK(static_cast<size_t>(std::atoi(size)) <= n, DeviceError,
                std::string("multiworker on GPUs: ") + size + " ranks on this machine but " + std::to_string(n) +
                    " usable GPU(s): NCCL needs one GPU per rank (start fewer ranks per machine)");
  return st.gpus[static_cast<size_t>(local) % n].index;
}

class MultiWorkerStrategy : public Strategy {
 public:
  explicit MultiWorkerStrategy(std::chrono::milliseconds timeout) : comm_(detail::make_mpi_communicator(timeout)) {}
  std::string name() const override {
    return "multiworker (" + std::to_string(comm_->size()) + " ranks, " + (nccl_ ? "NCCL over MPI" : "MPI") + ")";
  }
  int num_replicas() const override { return comm_->size(); }
  int rank() const override { return comm_->rank(); }

  void build(const ModelRecipe& recipe) override {
    Device device = Device::cpu();
    if (recipe.device.is_cuda()) {
      device = Device::cuda(pick_gpu(comm_->rank()));
      nccl_ = detail::NcclCommunicator::create_across(*comm_, device.index, comm_->timeout());
    }
    model_ = detail::build_replica(recipe, device);
    gradient_comm().broadcast(model_->params(), 0);
    if (nccl_) nccl_->wait();
  }

  History fit(const Dataset& train, const FitOptions& options, const Dataset* validation) override {
    EMBER_CHECK(model_ != nullptr, Error, "strategy: build() first");
    const int n = comm_->size();
    EMBER_CHECK(options.batch_size % n == 0, ArgumentError,
                "multiworker: the global batch size " + std::to_string(options.batch_size) +
                    " does not split evenly over " + std::to_string(n) + " ranks");
    stats_ = {};
    const Device device = model_->device();
    DataLoader loader(train, {.batch_size = options.batch_size,
                              .shuffle = options.shuffle,
                              .seed = options.seed,
                              .num_shards = n,
                              .shard = comm_->rank(),
                              .device = device});
    int64_t step = 0;
    MetricSums sums(device);
    const double busy0 = nccl_ ? nccl_->busy_seconds() : 0.0;
    FitLoopHooks hooks;
    hooks.begin_epoch = [&](int) { sums.reset(); };
    hooks.step = [&](const Batch& b) {
      const auto t0 = std::chrono::steady_clock::now();
      Communicator& gc = gradient_comm();
      gc.set_step(step);
      const int64_t rows = b.x.dim(0);
      try {
        maybe_fail(comm_->rank(), step);
        if (rows > 0) model_->compute_gradients(b.x, b.y, sums);
        detail::weight_gradients(model_->grads(), rows, b.global_size);
        const auto ta = std::chrono::steady_clock::now();
        gc.all_reduce_sum(model_->grads());  // MPI: blocks; NCCL: queued on the GPU
        if (!nccl_)
          stats_.allreduce_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - ta).count();
        model_->apply_gradients();
      } catch (const std::exception& e) {
        comm_->abort("step " + std::to_string(step) + ": " + e.what());  // ends every rank
        throw;
      }
      ++step;
      stats_.step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return StepResult{.samples = rows};
    };
    hooks.epoch_totals = [&] {
      const MetricSums::Values v = sums.read();
      if (nccl_) {
        nccl_->wait();
        stats_.allreduce_seconds = nccl_->busy_seconds() - busy0;
      }
      return StepResult{.loss_sum = v.loss_sum, .correct = v.correct};
    };
    hooks.reduce_epoch = [&](const StepResult& local) {
      Tensor t = Tensor::empty(Shape{3}, DType::F32, Device::cpu());
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
  // Gradients go over NCCL when the replica is on a GPU, else over MPI.
  Communicator& gradient_comm() { return nccl_ ? static_cast<Communicator&>(*nccl_) : *comm_; }

  std::unique_ptr<Communicator> comm_;              // MPI: bootstrap, metrics, CPU gradients
  std::unique_ptr<detail::NcclCommunicator> nccl_;  // GPU gradients
  std::unique_ptr<Sequential> model_;
};

}  // namespace

std::unique_ptr<Strategy> make_multiworker_strategy(std::chrono::milliseconds timeout) {
  return std::make_unique<MultiWorkerStrategy>(timeout);
}

}  // namespace ember
