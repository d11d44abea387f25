/// @file
/// Model checkpoints, in the safetensors format (core/safetensors.h).
///
/// Ember stores the model's parameters under their layer names ("conv2d/kernel", ...), the
/// optimizer's state under "optimizer/<name>" ("optimizer/m", "optimizer/v"), and in the
/// metadata: format, Ember version, architecture (JSON), optimizer (JSON: name, iterations,
/// hyper-parameters), epochs done, batches done of the next epoch (only when stopped mid-epoch),
/// seed and batch size, plus any caller-supplied keys. Runs resume exactly where they stopped,
/// mid-epoch included (the shuffle order is a function of seed and epoch).
///
/// Writes are atomic (core/safetensors.h), so a crash never leaves a broken checkpoint where a
/// good one was. Loading
/// validates sizes, header, dtypes, offsets and every shape against the model before changing
/// anything: a bad file throws CheckpointError and leaves the model as it was.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "../../core/safetensors.h"
#include "../../core/tensor.h"
#include "../../optim/optimizer.h"

namespace ember {

class Model;

/// Where training stands, saved with the weights so a run can resume exactly.
struct TrainingState {
  int epochs_done = 0;  ///< completed epochs (the next fit starts at this epoch)
  /// Batches of epoch `epochs_done` done already: a run stopped mid-epoch (a signal) resumes
  /// after them (FitOptions::initial_batch); 0 at an epoch boundary.
  int64_t batches_done = 0;
  uint64_t seed = 0;                           ///< the run's seed (shuffling; random layers)
  int64_t batch_size = 0;                      ///< the run's batch size
  std::map<std::string, std::string> extra{};  ///< free-form caller metadata
};

/// Optimizer state read from a checkpoint by load() before the model was compiled: compile()
/// restores it into an optimizer of the same name (another optimizer starts fresh, with a warning).
struct SavedOptimizerState {
  std::string name;                                     ///< "adam", ...
  int64_t iterations = 0;                               ///< the optimizer's step count
  std::vector<std::pair<std::string, Tensor>> tensors;  ///< "m", "v": f32, one value per parameter
  std::string path;                                     ///< the checkpoint, for messages
};
namespace detail {
// Checks `saved` against `opt` (every state tensor it keeps is there when iterations > 0, none
// it does not keep) and restores it onto `device`. Throws CheckpointError and changes nothing.
void check_optimizer_state(const Optimizer& opt, const SavedOptimizerState& saved);
void restore_optimizer_state(Optimizer& opt, const SavedOptimizerState& saved, Device device);
// Holds `saved` in a model without an optimizer until compile() (load_checkpoint's part).
void keep_optimizer_state(Model& model, SavedOptimizerState saved);
}  // namespace detail

/// Model-level save/load (Model::save / Model::load call these).
void save_checkpoint(const Model& model, const std::string& path, const TrainingState& state = {});
/// Loads parameters (and optimizer state when the model is compiled with the same optimizer)
/// into a model built with the same architecture; returns the saved training state. The file's
/// architecture is compared first: a different layer count, name, type, configuration or inbound
/// layer is named (CheckpointError), as far as the file's version records them (the first format, Ember
/// 0.3.0 and older: names and types). The file's weight-decay switches (Model::set_weight_decay) are adopted by a model
/// that has none of its own.
TrainingState load_checkpoint(Model& model, const std::string& path);

/// Recreates the model a checkpoint holds (a Sequential or a graph model of registered layers:
/// layers/model/registry.h) from its architecture, builds it and loads it as load_checkpoint does:
/// ready to evaluate, predict, or compile and resume (the optimizer state is kept for compile(),
/// the weight-decay switches restored).
/// `state` (optional) receives the training state. CheckpointError for a file written before
/// architectures held configurations (Ember 0.3.0 and older: build that model in code and load()),
/// or a layer type nobody registered (named).
std::unique_ptr<Model> load_model(const std::string& path, TrainingState* state = nullptr);

}  // namespace ember
