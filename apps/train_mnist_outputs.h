// What train_mnist writes: the history JSON, checkpoints, and the checks of its output paths and data.
#pragma once

#include <string>

#include "apps/train_mnist_args.h"
#include "ember.h"

namespace ember::apps {

void write_history(const std::string& path, const Args& a, const History& h, const EvalResult& test,
                   double total_seconds, const Device& device);

// Every output path, checked before the first step (an unwritable one fails now, not after
// training): --save and --history must be creatable files, --checkpoint-dir a writable folder
// (created when missing) holding no other run's checkpoints unless --resume continues that run
// or --overwrite replaces them (their epoch and best files are removed first, so none of the old
// run's is ever taken for this run's).
void check_outputs(const Args& a);

// The data checks that would otherwise surface only after the first epoch.
void check_data(const MnistData& data, const std::string& dir);

// The final save. Its failure must not throw the trained model away: then it is saved beside
// the asked path (or in the temporary folder) and the error says where.
void save_final(const Model& model, const std::string& path, const TrainingState& state);

// The checkpoint's best validation accuracy so far (-1 when it has none); CheckpointError when
// the stored value is not a number.
double parse_best(const TrainingState& state, const std::string& path);

}  // namespace ember::apps
