// One data-parallel training step of one replica (private to distribute/).
#pragma once

#include <span>
#include <vector>

#include "../layers/fit_loop.h"
#include "communicator.h"
#include "strategy.h"

namespace ember::detail {

// Gradients on this replica's shard (x, y), weighted by shard/global so that the all-reduced
// SUM is the global batch's mean gradient even for uneven shards, then one all-reduce and the
// optimizer step. An empty shard contributes zeros. Adds the all-reduce time to *allreduce_s.
StepResult replica_step(Sequential& model, Communicator& comm, const Tensor& x, const Tensor& y, int64_t global,
                        double* allreduce_s);

// Base of the strategies whose replicas all live in this process (Mirrored on CPU threads or
// on GPUs): replica 0 answers for all of them, a checkpoint is loaded into every one.
class LocalReplicas : public Strategy {
 public:
  EvalResult evaluate(const Dataset& data, int64_t batch_size) override { return model().evaluate(data, batch_size); }
  Sequential& model() override {
    EMBER_CHECK(!replicas_.empty(), Error, "strategy: build() first");
    return *replicas_[0];
  }
  TrainingState load(const std::string& path) override {
    TrainingState st = model().load(path);
    for (size_t r = 1; r < replicas_.size(); ++r) replicas_[r]->load(path);
    return st;
  }

 protected:
  std::vector<std::unique_ptr<Sequential>> replicas_;
};

// Collectives over all replicas of this process, issued from one thread: one call covers every
// replica (bufs[i] is replica i's). NCCL groups for GPU replicas; a sum in replica order on the
// host for CPU replicas (how the one-thread strategy below is tested without GPUs).
class ReplicaGroup {
 public:
  virtual ~ReplicaGroup() = default;
  virtual std::string name() const = 0;
  virtual void set_step(int64_t step) = 0;  // for error messages
  virtual void all_reduce_sum(std::span<Tensor* const> bufs) = 0;
  virtual void broadcast(std::span<Tensor* const> bufs, int root) = 0;
  virtual void wait() = 0;                  // every queued collective done (bounded)
  virtual double busy_seconds() const = 0;  // time inside collectives so far (device time for NCCL)
};
std::unique_ptr<ReplicaGroup> make_host_replica_group();
std::unique_ptr<ReplicaGroup> make_nccl_replica_group(const std::vector<int>& gpus, std::chrono::milliseconds timeout);

// Mirrored with every replica driven by one host thread (replica r on devices[r], each with its
// own DataLoader building its shard on that device): the GPU strategy, and with CPU devices and
// the host group its check on machines without GPUs (tests/test_distribute.cpp).
std::unique_ptr<Strategy> make_one_thread_mirrored(std::vector<Device> devices, std::unique_ptr<ReplicaGroup> group);

// One replica from the recipe, on `device`.
std::unique_ptr<Sequential> build_replica(const ModelRecipe& recipe, Device device);

// Scales this replica's gradients by shard/global (zeros for an empty shard), on their device,
// so that the all-reduced SUM over replicas is the mean gradient of the global batch.
void weight_gradients(Tensor& grads, int64_t shard, int64_t global);

// Evaluation sums (loss * n, correct, n) over this member's shard of `data` (batches built on
// the model's device), all-reduced over `comm`, a host communicator.
EvalResult sharded_evaluate(Sequential& model, Communicator& comm, const Dataset& data, int64_t batch_size);

}  // namespace ember::detail
