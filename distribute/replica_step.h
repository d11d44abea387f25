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

// DeviceError unless the recipe's device is the CPU (GPU replicas need NCCL, not built yet).
void require_cpu_replicas_for(const ModelRecipe& recipe, const std::string& strategy);

// Evaluation sums (loss * n, correct, n) over this member's shard of `data`, all-reduced.
EvalResult sharded_evaluate(Sequential& model, Communicator& comm, const Dataset& data, int64_t batch_size);

}  // namespace ember::detail
