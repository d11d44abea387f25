/// @file
/// What a checkpoint keeps beside the weights: where training stands (TrainingState) and an
/// optimizer's state read before the model had an optimizer (SavedOptimizerState). Model::save and
/// Model::load pass them; checkpoint.cpp reads and writes them, and declares here what Model's
/// compile() shares with it (the optimizer state's check and restore).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "../../core/tensor.h"
#include "../../optim/optimizer.h"

namespace ember {

class Model;

/// Where training stands, saved with the weights so a run can resume exactly.
struct TrainingState {
  int epochs_done = 0;  ///< completed epochs (the next fit starts at this epoch)
  /// Batches of epoch `epochs_done` done already: a run stopped mid-epoch (a signal) resumes
  /// after them (FitOptions::initial_batch); 0 at an epoch boundary. Needs batch_size (save()
  /// refuses it without).
  int64_t batches_done = 0;
  uint64_t seed = 0;                           ///< the run's seed (shuffling; random layers)
  int64_t batch_size = 0;                      ///< the run's batch size
  std::map<std::string, std::string> extra{};  ///< free-form caller metadata
  /// save() writes the optimizer's state (Adam's moments, its step) when true; false writes the
  /// weights alone, an inference file a third the size with Adam: `model.save(path, {.with_optimizer =
  /// false})`. load() of such a file leaves a compiled model's optimizer as it was, and a model not
  /// yet compiled starts its optimizer afresh at compile(). load() sets it to whether the file held
  /// optimizer state.
  bool with_optimizer = true;
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
void keep_optimizer_state(Model& model, std::optional<SavedOptimizerState> saved);
}  // namespace detail

}  // namespace ember
