// fit's CUDA-graph step (see graphed_step.h).
#include "graphed_step.h"

#include <string>

#include "../../core/error.h"
#include "../../core/runtime.h"

namespace ember::detail {

GraphedStep::Key GraphedStep::key_of(const Model& model) {
  // Every layer's seed and trainable flag (a frozen layer changes the step's work), mixed in order.
  uint64_t seeds = 0;
  for (const auto& l : model.layers())
    seeds = (seeds ^ l->random_seed() ^ (l->trainable() ? 0 : 0xD1B54A32D192ED03ull)) * 0x100000001B3ull +
            0x9E3779B97F4A7C15ull;
  const Optimizer& opt = *model.optimizer();
  return Key{opt.id(), opt.state_version(), kernel_settings_version(), seeds, model.precision()};
}

void GraphedStep::capture(Model& model, const Batch& batch, MetricSums& sums, const Key& key) {
  Optimizer& opt = *model.optimizer();
  const int64_t iterations = opt.iterations();
  opt.sync_device_rate();  // outside the capture: the graph reads the rate, never writes it
  try {
    graph_ = CudaGraph::capture(model.device(), [&] {
      batch.gather();
      model.train_step(batch.inputs, batch.targets, sums);  // queued into the graph, not run
    });
    graph_key_ = key;
    graph_.launch();                 // this step: its host part (the optimizer's count) ran in the capture
  } catch (const BackendError& e) {  // CUDA's, or cuDNN's / cuBLAS's inside the capture
    opt.set_iterations(iterations);  // nothing ran: the device's count is uploaded again
    throw CudaError(std::string("cuda graphs: capturing the training step failed (train without graphs): ") + e.what());
  } catch (...) {
    opt.set_iterations(iterations);
    throw;
  }
}

void GraphedStep::run(Model& model, const Batch& batch, MetricSums& sums) {
  if (batch.rows() == full_rows_) {
    const Key key = key_of(model);
    if (graph_.captured() && !(key == graph_key_)) graph_.reset();
    if (!(key == warm_key_)) {  // the warm-up (device-side counts, state) starts again
      warm_key_ = key;
      eager_full_steps_ = 0;
    }
    if (!graph_.captured() && eager_full_steps_ >= kWarmupSteps) return capture(model, batch, sums, key);
    if (graph_.captured()) {
      model.optimizer()->sync_device_rate();  // this step's rate (a schedule may have changed it)
      graph_.launch();
      model.optimizer()->count_step();
      return;
    }
    ++eager_full_steps_;
  } else {
    eager_full_steps_ = 0;  // the layers now hold other shapes: warm up again before a capture
  }
  if (batch.gather) batch.gather();
  model.train_step(batch.inputs, batch.targets, sums);
}

}  // namespace ember::detail
