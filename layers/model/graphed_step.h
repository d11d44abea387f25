// fit's training step as a CUDA graph (FitOptions::cuda_graphs): how a step runs, not what it
// is (Model::train_step is). Two eager full-size steps make every lazy choice (cuDNN plans,
// workspaces, the optimizer's state), the third is captured, the rest replay it. fit's
// ModelTraining (fit.cpp) owns one; it knows Model's public API and CudaGraph.
#pragma once

#include <cstdint>

#include "../../core/cuda_graph.h"
#include "../../data/dataloader.h"
#include "model.h"

namespace ember::detail {

class GraphedStep {
 public:
  /// `full_rows`: the batch size whose steps are captured; other batches (the short last one)
  /// run eagerly.
  explicit GraphedStep(int64_t full_rows) : full_rows_(full_rows) {}
  /// One training step of `model` on `batch` (gathered into its buffers on the device), its sums
  /// added to `sums`: eager, captured or replayed. CudaError when the capture fails.
  void run(Model& model, const Batch& batch, MetricSums& sums);

 private:
  // What the captured graph holds besides its buffers: the optimizer and its state (a restored
  // state is new values), the kernel settings (TF32, NHWC, fused, deterministic, find, the
  // convolution policy: kernel_settings_version) and the layers' random seeds. A change means a
  // new capture, after two eager steps (the first uploading the new values). The learning rate
  // is not in the graph but in device memory (Optimizer::sync_device_rate, written before each
  // replay): a schedule, per epoch or per step, replays the one graph.
  struct Key {
    uint64_t optimizer = 0;
    int64_t state_version = -1;
    uint64_t kernel_settings = 0, seeds = 0;
    Precision precision = Precision::Float32;  // the model's (its own setting is not a kernel setting)
    bool operator==(const Key&) const = default;
  };
  static Key key_of(const Model& model);
  void capture(Model& model, const Batch& batch, MetricSums& sums, const Key& key);

  static constexpr int kWarmupSteps = 2;
  const int64_t full_rows_;
  CudaGraph graph_;
  Key graph_key_, warm_key_;  // the captured graph's; the eager warm-up steps'
  int eager_full_steps_ = 0;
};

}  // namespace ember::detail
