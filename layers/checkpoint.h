// Model checkpoints, in the safetensors format (core/safetensors.h).
//
// Ember stores the model's parameters under their layer names ("conv2d/kernel", ...), the
// optimizer's state under "optimizer/<name>" ("optimizer/m", "optimizer/v"), and in the
// metadata: format, Ember version, architecture (JSON), optimizer (JSON: name, iterations,
// hyper-parameters), epochs done, seed and batch size, plus any caller-supplied keys. Runs
// resume at epoch boundaries (the shuffle order is a function of seed and epoch).
//
// Writes are atomic (core/safetensors.h), so a crash never leaves a broken checkpoint where a
// good one was. Loading
// validates sizes, header, dtypes, offsets and every shape against the model before changing
// anything: a bad file throws CheckpointError and leaves the model as it was.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "../core/safetensors.h"
#include "../core/tensor.h"

namespace ember {

class Sequential;

// Where training stands, saved with the weights so a run can resume exactly.
struct TrainingState {
  int epochs_done = 0;  // completed epochs (the next fit starts at this epoch)
  uint64_t seed = 0;
  int64_t batch_size = 0;
  std::map<std::string, std::string> extra{};  // free-form caller metadata
};

// Model-level save/load (Sequential::save / Sequential::load call these).
void save_checkpoint(const Sequential& model, const std::string& path, const TrainingState& state = {});
// Loads parameters (and optimizer state when the model is compiled with the same optimizer)
// into a model built with the same architecture; returns the saved training state.
TrainingState load_checkpoint(Sequential& model, const std::string& path);

}  // namespace ember
