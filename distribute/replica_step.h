// One data-parallel training step of one replica (private to distribute/).
#pragma once

#include "distribute/communicator.h"
#include "distribute/strategy.h"
#include "layers/fit_loop.h"

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

// One replica from the recipe, on `device`.
std::unique_ptr<Sequential> build_replica(const ModelRecipe& recipe, Device device);

// Scales this replica's gradients by shard/global (zeros for an empty shard), on their device,
// so that the all-reduced SUM over replicas is the mean gradient of the global batch.
void weight_gradients(Tensor& grads, int64_t shard, int64_t global);

// Evaluation sums (loss * n, correct, n) over this member's shard of `data` (batches built on
// the model's device), all-reduced over `comm`, a host communicator.
EvalResult sharded_evaluate(Sequential& model, Communicator& comm, const Dataset& data, int64_t batch_size);

}  // namespace ember::detail
