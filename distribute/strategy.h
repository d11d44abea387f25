/// @file
/// Strategy: how a model is trained across devices and processes (docs/architecture.md).
/// @code{.unparsed}
///   Default       one replica in this process
///   Mirrored      N replicas in this process (on CPUs, or one per GPU), driven by one thread:
///                 each step's global batch is split evenly, gradients are averaged with one
///                 all-reduce (a host sum, or one grouped NCCL call), every replica runs the
///                 same optimizer step
///   MultiWorker   one replica per process, launched by mpirun/srun; MPI gives rank and size
///                 and reduces CPU gradients (GPU ones: NCCL, bootstrapped by MPI); each rank
///                 reads its own shard of every batch
/// @endcode
/// Mirrored and MultiWorker are configurations of one data-parallel step (data_parallel.h).
/// All give the same update as one replica on the same global batch (tests/test_distribute.cpp).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "../layers/model/sequential.h"

namespace ember {

/// How to make one replica: the same recipe runs once per replica.
struct ModelRecipe {
  /// The model of every replica, made the same way each time: a graph model (make_model), or a
  /// Sequential that add_layers fills. Exactly one of the two. A model make_model returns built
  /// (load_model: with its weights) is not built again; its input must be input_shape. A graph
  /// model may leave input_shape empty (its Inputs' shapes; with several inputs it must).
  std::function<std::unique_ptr<Model>()> make_model;
  std::function<void(Sequential&)> add_layers;  ///< fills a Sequential replica (or make_model)
  Shape input_shape;  ///< the per-sample input shape the replicas are built for (see make_model)
  uint64_t seed = 0;  ///< build()'s seed: every replica starts from the same weights
  /// The optimizer of every replica (each its own; required).
  std::function<std::unique_ptr<Optimizer>()> make_optimizer;
  /// The loss of every replica (each its own: losses keep buffers) and the metrics they share.
  /// Not given: softmax cross-entropy on labels with "accuracy" (compile(optimizer)).
  std::function<std::unique_ptr<Loss>()> make_loss;
  MetricList metrics;  ///< with or without make_loss
  /// A model of several outputs: a loss, weight and metrics per output (Model::compile's
  /// OutputLoss list), made once per replica. Not with make_loss or metrics.
  std::function<std::vector<OutputLoss>()> make_outputs;
  /// Model::set_weight_decay switches, applied to every replica (a call on strategy.model() would
  /// reach replica 0 only, and the replicas would drift apart).
  std::vector<std::pair<std::string, bool>> weight_decay;
  /// Default: where the replica runs. Mirrored: ignored (the strategy's devices). MultiWorker:
  /// cpu, or any GPU for one GPU per process (the process's local rank picks which).
  Device device = Device::cpu();
};

/// Where a strategy's last fit spent its time (Strategy::stats()).
struct StrategyStats {
  double allreduce_seconds = 0;  ///< in gradient all-reduces during the last fit (NCCL: device time)
  double step_seconds = 0;       ///< in whole training steps during the last fit
};

/// How a model is trained across devices and processes (see strategy.h); made by
/// make_default_strategy(), make_mirrored_cpu_strategy(), make_mirrored_gpu_strategy() or
/// make_multiworker_strategy().
class Strategy {
 public:
  virtual ~Strategy() = default;
  /// "default", or the kind with its replicas and transport ("mirrored (2 cpu replicas)").
  virtual std::string name() const = 0;
  virtual int num_replicas() const = 0;          ///< in total, across processes
  virtual int rank() const { return 0; }         ///< this process's rank
  bool is_chief() const { return rank() == 0; }  ///< Rank 0: the process that saves and prints.
  /// Builds every replica from the recipe; replica 0's weights are broadcast to all.
  virtual void build(const ModelRecipe& recipe) = 0;
  /// Model::fit on every replica, each step's global batch split among them (build() first).
  virtual History fit(const Dataset& train, const FitOptions& options, const Dataset* validation = nullptr) = 0;
  /// Metrics over the whole data set (all ranks together).
  virtual EvalResult evaluate(const Dataset& data, int64_t batch_size = 256) = 0;
  /// Replica 0 (its parameters equal every replica's): for saving, predicting, summaries.
  virtual Model& model() = 0;
  /// Loads a checkpoint into every local replica (each rank reads the file itself).
  virtual TrainingState load(const std::string& path) { return model().load(path); }

  // --- Your own loop: fit's training step in its three parts ---------------------------------
  /// compute_gradients: every local replica computes the gradients of its shard of (x, y): this
  /// process's rows of the global batch, cut into near-equal contiguous shards (as fit's loaders
  /// cut a batch) and copied to each replica's device, weighted by the shard's share of the global
  /// batch (every process's rows together). Returns the mean loss over this process's rows (waits
  /// for GPU replicas). all_reduce_gradients: the gradients (and moving statistics) summed over
  /// every replica of every process. apply_gradients: every replica's optimizer step (clipping and
  /// decay see the reduced gradient). Between the parts the gradients are in each replica's
  /// grads(). Every process must call the three in the same order. The default strategy: its one
  /// model's compute_gradients and apply_gradients, nothing to reduce. A model of several inputs
  /// takes a list xs (one batch per input, in Model::input_names()' order), one of several outputs
  /// a list ys (one target batch per output).
  virtual float compute_gradients(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys);
  /// compute_gradients() of a model of several inputs and one output.
  float compute_gradients(const std::vector<Tensor>& xs, const Tensor& y) {
    return compute_gradients(xs, std::vector<Tensor>{y});
  }
  /// compute_gradients() of a model of one input and one output.
  float compute_gradients(const Tensor& x, const Tensor& y) {
    return compute_gradients(std::vector<Tensor>{x}, std::vector<Tensor>{y});
  }
  /// The second part: gradients (and moving statistics) summed over every replica of every process.
  virtual void all_reduce_gradients() {}
  /// The third part: every replica's optimizer step.
  virtual void apply_gradients() { model().apply_gradients(); }
  /// The three in a row.
  float train_step(const std::vector<Tensor>& xs, const std::vector<Tensor>& ys) {
    const float loss = compute_gradients(xs, ys);
    all_reduce_gradients();
    apply_gradients();
    return loss;
  }
  /// train_step() of a model of several inputs and one output.
  float train_step(const std::vector<Tensor>& xs, const Tensor& y) { return train_step(xs, std::vector<Tensor>{y}); }
  /// train_step() of a model of one input and one output.
  float train_step(const Tensor& x, const Tensor& y) {
    return train_step(std::vector<Tensor>{x}, std::vector<Tensor>{y});
  }
  const StrategyStats& stats() const { return stats_; }  ///< Where the last fit spent its time.

 protected:
  StrategyStats stats_;  ///< what stats() returns: the strategy fills it during fit
};

/// One replica in this process, on ModelRecipe::device: its model's fit, compute_gradients and
/// apply_gradients, nothing to reduce.
std::unique_ptr<Strategy> make_default_strategy();
/// N CPU replicas of this process, driven by one thread (each op uses every OpenMP thread);
/// gradients are summed on the host in replica order. A host sum never waits, so `timeout` is
/// each replica's deadline for its part of a step: a replica that hangs past it ends the
/// process (exit code 3) with a message naming it (distribute/watchdog.h).
std::unique_ptr<Strategy> make_mirrored_cpu_strategy(int replicas,
                                                     std::chrono::milliseconds timeout = std::chrono::seconds(60));
/// One replica per entry of `gpus` (CUDA device indices): with each GPU once, gradients are
/// summed by one grouped NCCL all-reduce per step; a GPU listed N times holds N replicas (all on
/// its one stream), and then the gradients are summed on the host through copies (slow: meant
/// to check the replica logic on a one-GPU machine). Throws DeviceError without NCCL (distinct
/// GPUs) or without those GPUs.
std::unique_ptr<Strategy> make_mirrored_gpu_strategy(const std::vector<int>& gpus,
                                                     std::chrono::milliseconds timeout = std::chrono::seconds(60));
/// One replica per MPI process, on the CPU (MPI_Allreduce) or on a GPU (NCCL, its unique id sent
/// by MPI; local rank r uses the r-th usable GPU modulo their number). Throws DeviceError in a
/// build without MPI.
std::unique_ptr<Strategy> make_multiworker_strategy(std::chrono::milliseconds timeout = std::chrono::seconds(60));

}  // namespace ember
