// Mirrored on GPUs: one replica per GPU of this process, all driven by one host thread. A step
// queues, for each replica, its shard's gather, forward and backward and the gradient weighting
// on that GPU's stream; then one grouped NCCL all-reduce over every GPU; then each replica's
// optimizer step. Nothing waits for a GPU inside a step except the all-reduce's bounded wait
// for the previous step's (nccl_communicator.h), so the host stays at most one step ahead.
#include <algorithm>
#include <set>

#include "core/runtime.h"
#include "distribute/nccl_communicator.h"
#include "distribute/replica_step.h"
#include "distribute/strategy.h"

namespace ember {

namespace {

class MirroredGpuStrategy : public detail::LocalReplicas {
 public:
  MirroredGpuStrategy(std::vector<int> gpus, std::chrono::milliseconds timeout)
      : gpus_(std::move(gpus)), comms_(detail::NcclCommunicator::create_local(gpus_, timeout)) {
    for (auto& c : comms_) members_.push_back(c.get());
  }
  std::string name() const override {
    std::string list;
    for (int g : gpus_) list += (list.empty() ? "" : ",") + std::to_string(g);
    return "mirrored (" + std::to_string(gpus_.size()) + " GPUs: " + list + ", NCCL)";
  }
  int num_replicas() const override { return static_cast<int>(gpus_.size()); }

  void build(const ModelRecipe& recipe) override {
    replicas_.clear();
    for (int g : gpus_) replicas_.push_back(detail::build_replica(recipe, Device::cuda(g)));
    // Every replica is built from the same seed, so they already agree; the broadcast makes it
    // so whatever the recipe does (and is what a checkpoint load relies on too).
    broadcast_params();
  }

  History fit(const Dataset& train, const FitOptions& options, const Dataset* validation) override {
    EMBER_CHECK(!replicas_.empty(), Error, "strategy: build() first");
    const int n = num_replicas();
    EMBER_CHECK(options.batch_size % n == 0, ArgumentError,
                "mirrored: the global batch size " + std::to_string(options.batch_size) + " does not split evenly over " +
                    std::to_string(n) + " GPUs");
    stats_ = {};
    // One loader per GPU: each holds the data set on its GPU and gathers its shard there.
    std::vector<std::unique_ptr<DataLoader>> loaders;
    std::vector<MetricSums> sums;
    for (int r = 0; r < n; ++r) {
      loaders.push_back(std::make_unique<DataLoader>(
          train, DataLoaderOptions{.batch_size = options.batch_size, .shuffle = options.shuffle, .seed = options.seed,
                                   .num_shards = n, .shard = r, .device = Device::cuda(gpus_[static_cast<size_t>(r)])}));
      sums.emplace_back(Device::cuda(gpus_[static_cast<size_t>(r)]));
    }
    const double busy0 = comms_[0]->busy_seconds();
    int64_t step = 0;
    std::vector<Batch> shards(static_cast<size_t>(n));
    FitLoopHooks hooks;
    hooks.begin_epoch = [&](int epoch) {
      for (int r = 1; r < n; ++r) loaders[static_cast<size_t>(r)]->start_epoch(epoch);
      for (auto& s : sums) s.reset();
    };
    hooks.step = [&](const Batch& b0) {
      const auto t0 = std::chrono::steady_clock::now();
      shards[0] = b0;
      for (int r = 1; r < n; ++r)
        EMBER_CHECK(loaders[static_cast<size_t>(r)]->next(shards[static_cast<size_t>(r)]), Error,
                    "mirrored: replica " + std::to_string(r) + "'s loader ran out before replica 0's");
      std::vector<Tensor*> grads;
      for (int r = 0; r < n; ++r) {
        const auto ri = static_cast<size_t>(r);
        comms_[ri]->set_step(step);
        Sequential& m = *replicas_[ri];
        try {
          maybe_fail(r, step);
          const int64_t rows = shards[ri].x.dim(0);
          if (rows > 0) m.compute_gradients(shards[ri].x, shards[ri].y, sums[ri]);
          detail::weight_gradients(m.grads(), rows, b0.global_size);
        } catch (const std::exception& e) {
          throw Error("replica " + std::to_string(r) + " (cuda:" + std::to_string(gpus_[ri]) + ") failed at step " +
                      std::to_string(step) + ": " + e.what());
        }
        grads.push_back(&m.grads());
      }
      detail::NcclCommunicator::all_reduce_sum(members_, grads);
      for (auto& m : replicas_) m->apply_gradients();
      ++step;
      stats_.step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return StepResult{.samples = b0.global_size};
    };
    hooks.epoch_totals = [&] {
      StepResult t;
      for (const auto& s : sums) {
        const MetricSums::Values v = s.read();  // waits for that GPU's queued work
        t.loss_sum += v.loss_sum;
        t.correct += v.correct;
      }
      detail::NcclCommunicator::wait(members_);
      stats_.allreduce_seconds = comms_[0]->busy_seconds() - busy0;  // device time on GPU 0
      return t;
    };
    hooks.evaluate = [&](const Dataset& d, int64_t bs) { return model().evaluate(d, bs); };
    hooks.print = options.verbose > 0;
    return fit_loop(*loaders[0], options, validation, hooks);
  }


 private:
  void broadcast_params() {
    std::vector<Tensor*> params;
    for (auto& m : replicas_) params.push_back(&m->params());
    detail::NcclCommunicator::broadcast(members_, params, 0);
    detail::NcclCommunicator::wait(members_);
  }

  std::vector<int> gpus_;
  std::vector<std::unique_ptr<detail::NcclCommunicator>> comms_;
  std::vector<detail::NcclCommunicator*> members_;
};

}  // namespace

std::unique_ptr<Strategy> make_mirrored_gpu_strategy(const std::vector<int>& gpus, std::chrono::milliseconds timeout) {
  EMBER_CHECK(!gpus.empty(), ArgumentError, "mirrored: no GPUs given");
  EMBER_CHECK(std::set<int>(gpus.begin(), gpus.end()).size() == gpus.size(), ArgumentError,
              "mirrored: a GPU is listed twice (NCCL needs one replica per GPU)");
  const CudaStatus& st = cuda_status();
  EMBER_CHECK(st.usable, DeviceError, "mirrored on GPUs: no usable GPU (" + st.reason + ")");
  for (int g : gpus)
    EMBER_CHECK(std::any_of(st.gpus.begin(), st.gpus.end(), [&](const GpuInfo& i) { return i.index == g; }),
                DeviceError,
                "mirrored: there is no usable cuda:" + std::to_string(g) + " (" + std::to_string(st.gpus.size()) +
                    " usable GPU" + (st.gpus.size() == 1 ? "" : "s") + ")");
  return std::make_unique<MirroredGpuStrategy>(gpus, timeout);
}

}  // namespace ember
