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

#include <memory>
#include <string>

#include "training_state.h"

namespace ember {

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
