// The one data-parallel step and the strategy built on it (private to distribute/).
//
// Mirrored and MultiWorker are configurations of one DataParallelStrategy: this process drives
// its local replicas (Mirrored: N, one per device; MultiWorker: 1) from one thread, and one
// Communicator sums every replica's gradients (a host sum, NCCL within a process, MPI or NCCL
// across processes). Default is the plain Model::fit (strategy.cpp).
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "../layers/model/fit_loop.h"
#include "communicator.h"
#include "fault_injection.h"
#include "strategy.h"
#include "watchdog.h"

namespace ember::detail {

// One replica from the recipe, on `device`.
std::unique_ptr<Model> build_replica(const ModelRecipe& recipe, Device device);

// Scales a replica's gradients by shard/global (zeros for an empty shard), on their device, so
// that the all-reduced SUM over replicas is the mean gradient of the global batch.
void weight_gradients(Tensor& grads, int64_t shard, int64_t global);

// THE step. Local replica i (global member gradients.rank() + i, on devices[i]) computes its
// gradients on shards[i] (adding loss and hits to sums[i]) and weights them by its share of
// the `global` rows; then ONE all-reduce over every local replica's gradients; then every
// replica's optimizer step. With a `watchdog`, each replica's part runs under its deadline. A failure in replica i's
// part throws Error("replica <member> (<device>) failed at step <step>: ...").
void data_parallel_step(std::span<const std::unique_ptr<Model>> replicas, std::span<const Device> devices,
                        std::span<const Batch> shards, int64_t global, std::span<MetricSums> sums,
                        Communicator& gradients, int64_t step, const FaultPlan& fault,
                        ReplicaWatchdog* watchdog = nullptr);
// Its three parts (the custom loop's Strategy::compute_gradients / all_reduce_gradients /
// apply_gradients run them one by one): the replicas' weighted gradients and moving statistics;
// their all-reduce; then every replica's optimizer step.
void compute_replica_gradients(std::span<const std::unique_ptr<Model>> replicas, std::span<const Device> devices,
                               std::span<const Batch> shards, int64_t global, std::span<MetricSums> sums,
                               Communicator& gradients, int64_t step, const FaultPlan& fault,
                               ReplicaWatchdog* watchdog = nullptr);
// rows[i]: replica i's shard rows, which weight its moving statistics before their sum.
void all_reduce_replicas(std::span<const std::unique_ptr<Model>> replicas, std::span<const int64_t> rows,
                         int64_t global, Communicator& gradients);

// Evaluation sums (loss * n, correct, n) over this member's shard of `data` (batches built on
// the model's device), all-reduced over `comm`, a host communicator with one member here.
EvalResult sharded_evaluate(Model& model, Communicator& comm, const Dataset& data, int64_t batch_size);

struct DataParallelConfig {
  std::string kind;  // "mirrored", "multiworker": names the strategy and prefixes its errors
  std::string unit;  // what the members are called in errors: "replicas", "ranks"
  // In build(): sets `devices` (one per local replica, when not set already) and returns the
  // communicator of the replicas' gradients.
  std::function<std::shared_ptr<Communicator>(const ModelRecipe&, std::vector<Device>& devices)> connect;
  std::vector<Device> devices;
  // Across processes (MPI): epoch metrics and evaluation are reduced over it, and a failure
  // aborts it (ending every rank). Null: every replica is in this process.
  std::shared_ptr<Communicator> world;
  // Mirrored CPU replicas: each replica's part of a step must finish within this, or the
  // ReplicaWatchdog ends the job naming it (0: no deadline).
  std::chrono::milliseconds replica_timeout{0};
};

class DataParallelStrategy final : public Strategy {
 public:
  explicit DataParallelStrategy(DataParallelConfig config);
  ~DataParallelStrategy() override;
  std::string name() const override;
  int num_replicas() const override;
  int rank() const override { return config_.world ? config_.world->rank() : 0; }
  bool spans_processes() const { return config_.world != nullptr; }
  bool has_replica_deadline() const { return config_.replica_timeout.count() > 0; }
  void build(const ModelRecipe& recipe) override;
  History fit(const Dataset& train, const FitOptions& options, const Dataset* validation) override;
  EvalResult evaluate(const Dataset& data, int64_t batch_size) override;
  Model& model() override;
  TrainingState load(const std::string& path) override;
  using Strategy::compute_gradients;
  float compute_gradients(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys) override;
  void all_reduce_gradients() override;
  void apply_gradients() override;

  FaultPlan fault;  // detail::inject_fault

 private:
  class Training;                            // fit's TrainingTarget (data_parallel.cpp)
  DataParallelConfig config_;                // holds `world`: destroyed last (MPI_Finalize)
  std::shared_ptr<Communicator> gradients_;  // may be `world` itself (MultiWorker on CPUs)
  std::vector<std::unique_ptr<Model>> replicas_;
  std::vector<MetricSums> loop_sums_;  // the custom loop's, one per replica
  int64_t loop_step_ = 0;              // the custom loop's step count (collectives' and faults' step)
  std::vector<int64_t> loop_rows_;     // the computed step's shard rows, until its all-reduce
  int64_t loop_global_ = 0;
  std::unique_ptr<ReplicaWatchdog> loop_watchdog_;  // with replica_timeout: the custom loop's deadline
};

// MultiWorker over `world` (MPI in make_multiworker_strategy; tests use the thread communicator).
std::unique_ptr<Strategy> make_multiworker_strategy(std::shared_ptr<Communicator> world);

}  // namespace ember::detail
