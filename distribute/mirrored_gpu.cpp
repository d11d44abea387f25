// Mirrored with every replica driven by one host thread (the GPU strategy). A step queues, for
// each replica, its shard's gather, forward and backward and the gradient weighting on that
// replica's device; then one collective over all replicas (on GPUs: one NCCL group); then each
// replica's optimizer step. On GPUs nothing waits for the device inside a step except the
// all-reduce's bounded wait for the previous step's (nccl_communicator.h), so the host stays at
// most one step ahead. With CPU devices and the host group it runs the same logic on CPUs.
#include <algorithm>
#include <set>

#include "../core/runtime.h"
#include "nccl_communicator.h"
#include "replica_step.h"
#include "strategy.h"

namespace ember {

namespace detail {

namespace {

class OneThreadMirrored : public LocalReplicas {
 public:
  OneThreadMirrored(std::vector<Device> devices, std::unique_ptr<ReplicaGroup> group)
      : devices_(std::move(devices)), group_(std::move(group)) {}
  std::string name() const override {
    std::string list;
    for (const Device& d : devices_) list += (list.empty() ? "" : ",") + d.str();
    return "mirrored (" + std::to_string(devices_.size()) + " replicas on " + list + ", " + group_->name() + ")";
  }
  int num_replicas() const override { return static_cast<int>(devices_.size()); }

  void build(const ModelRecipe& recipe) override {
    replicas_.clear();
    for (const Device& d : devices_) replicas_.push_back(build_replica(recipe, d));
    // Every replica is built from the same seed, so they already agree; the broadcast makes it
    // so whatever the recipe does.
    std::vector<Tensor*> params;
    for (auto& m : replicas_) params.push_back(&m->params());
    group_->broadcast(params, 0);
    group_->wait();
  }

  History fit(const Dataset& train, const FitOptions& options, const Dataset* validation) override {
    EMBER_CHECK(!replicas_.empty(), Error, "strategy: build() first");
    const int n = num_replicas();
    EMBER_CHECK(options.batch_size % n == 0, ArgumentError,
                "mirrored: the global batch size " + std::to_string(options.batch_size) +
                    " does not split evenly over " + std::to_string(n) + " replicas");
    stats_ = {};
    // One loader per replica: each builds its shard on its replica's device (on a GPU from the
    // data set held there).
    std::vector<std::unique_ptr<DataLoader>> loaders;
    std::vector<MetricSums> sums;
    for (int r = 0; r < n; ++r) {
      const Device d = devices_[static_cast<size_t>(r)];
      loaders.push_back(std::make_unique<DataLoader>(train, DataLoaderOptions{.batch_size = options.batch_size,
                                                                              .shuffle = options.shuffle,
                                                                              .seed = options.seed,
                                                                              .num_shards = n,
                                                                              .shard = r,
                                                                              .device = d}));
      sums.emplace_back(d);
    }
    const double busy0 = group_->busy_seconds();
    int64_t step = 0;
    std::vector<Batch> shards(static_cast<size_t>(n));
    std::vector<Tensor*> grads;  // every replica's flat gradients, all-reduced in one call
    for (auto& m : replicas_) grads.push_back(&m->grads());
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
      group_->set_step(step);
      for (int r = 0; r < n; ++r) {
        const auto ri = static_cast<size_t>(r);
        Sequential& m = *replicas_[ri];
        try {
          maybe_fail(r, step);
          const int64_t rows = shards[ri].x.dim(0);
          if (rows > 0) m.compute_gradients(shards[ri].x, shards[ri].y, sums[ri]);
          weight_gradients(m.grads(), rows, b0.global_size);
        } catch (const std::exception& e) {
          throw Error("replica " + std::to_string(r) + " (" + devices_[ri].str() + ") failed at step " +
                      std::to_string(step) + ": " + e.what());
        }
      }
      group_->all_reduce_sum(grads);
      for (auto& m : replicas_) m->apply_gradients();
      ++step;
      stats_.step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      return StepResult{.samples = b0.global_size};
    };
    hooks.epoch_totals = [&] {
      StepResult t;
      for (const auto& s : sums) {
        const MetricSums::Values v = s.read();  // waits for that device's queued work
        t.loss_sum += v.loss_sum;
        t.correct += v.correct;
      }
      group_->wait();
      stats_.allreduce_seconds = group_->busy_seconds() - busy0;
      return t;
    };
    hooks.evaluate = [&](const Dataset& d, int64_t bs) { return model().evaluate(d, bs); };
    hooks.print = options.verbose > 0;
    return fit_loop(*loaders[0], options, validation, hooks);
  }

 private:
  std::vector<Device> devices_;
  std::unique_ptr<ReplicaGroup> group_;
};

// CPU replicas: the sum in replica order (member 0 first, as LocalCommunicator), on the host.
class HostReplicaGroup : public ReplicaGroup {
 public:
  std::string name() const override { return "host sum"; }
  void set_step(int64_t) override {}
  void all_reduce_sum(std::span<Tensor* const> bufs) override {
    const auto t0 = std::chrono::steady_clock::now();
    check(bufs, "all_reduce");
    const int64_t len = bufs[0]->numel();
    float* acc = bufs[0]->f32();
    for (size_t r = 1; r < bufs.size(); ++r) {
      const float* b = bufs[r]->f32();
      for (int64_t i = 0; i < len; ++i) acc[i] += b[i];
    }
    for (size_t r = 1; r < bufs.size(); ++r) std::copy(acc, acc + len, bufs[r]->f32());
    busy_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  void broadcast(std::span<Tensor* const> bufs, int root) override {
    check(bufs, "broadcast");
    EMBER_CHECK(root >= 0 && static_cast<size_t>(root) < bufs.size(), ArgumentError, "broadcast: bad root");
    for (size_t r = 0; r < bufs.size(); ++r)
      if (static_cast<int>(r) != root) bufs[r]->copy_from(*bufs[static_cast<size_t>(root)]);
  }
  void wait() override {}
  double busy_seconds() const override { return busy_; }

 private:
  static void check(std::span<Tensor* const> bufs, const char* what) {
    EMBER_CHECK(!bufs.empty(), ArgumentError, std::string("host group ") + what + ": no buffers");
    for (const Tensor* t : bufs)
      EMBER_CHECK(t->dtype() == DType::F32 && t->device().is_cpu() && t->numel() == bufs[0]->numel(), ArgumentError,
                  std::string("host group ") + what + ": expects f32 cpu buffers of one size, got " + t->str());
  }
  double busy_ = 0;
};

// GPU replicas: one NCCL communicator per GPU (ncclCommInitAll), every call one group.
class NcclReplicaGroup : public ReplicaGroup {
 public:
  NcclReplicaGroup(const std::vector<int>& gpus, std::chrono::milliseconds timeout)
      : comms_(NcclCommunicator::create_local(gpus, timeout)) {
    for (auto& c : comms_) members_.push_back(c.get());
  }
  std::string name() const override { return "NCCL"; }
  void set_step(int64_t step) override {
    for (auto* m : members_) m->set_step(step);
  }
  void all_reduce_sum(std::span<Tensor* const> bufs) override { NcclCommunicator::all_reduce_sum(members_, bufs); }
  void broadcast(std::span<Tensor* const> bufs, int root) override {
    NcclCommunicator::broadcast(members_, bufs, root);
  }
  void wait() override { NcclCommunicator::wait(members_); }
  double busy_seconds() const override { return members_.front()->busy_seconds(); }  // on the first GPU

 private:
  std::vector<std::unique_ptr<NcclCommunicator>> comms_;
  std::vector<NcclCommunicator*> members_;
};

}  // namespace

std::unique_ptr<ReplicaGroup> make_host_replica_group() { return std::make_unique<HostReplicaGroup>(); }

std::unique_ptr<ReplicaGroup> make_nccl_replica_group(const std::vector<int>& gpus, std::chrono::milliseconds timeout) {
  return std::make_unique<NcclReplicaGroup>(gpus, timeout);
}

std::unique_ptr<Strategy> make_one_thread_mirrored(std::vector<Device> devices, std::unique_ptr<ReplicaGroup> group) {
  EMBER_CHECK(!devices.empty() && group != nullptr, ArgumentError, "mirrored: no replicas");
  return std::make_unique<OneThreadMirrored>(std::move(devices), std::move(group));
}

}  // namespace detail

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
  std::vector<Device> devices;
  for (int g : gpus) devices.push_back(Device::cuda(g));
  return detail::make_one_thread_mirrored(std::move(devices), detail::make_nccl_replica_group(gpus, timeout));
}

}  // namespace ember
