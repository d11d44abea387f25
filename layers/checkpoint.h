// Checkpoints in the safetensors format (readable by PyTorch's safetensors and others):
//   [8 bytes: little-endian u64 header length N][N bytes: JSON header][raw little-endian data]
// The header maps each tensor name to {"dtype": "F32", "shape": [...], "data_offsets": [b, e]}
// (offsets into the data section) and holds "__metadata__": a string-to-string map.
//
// Ember stores the model's parameters under their layer names ("conv2d/kernel", ...), the
// optimizer's state under "optimizer/<name>" ("optimizer/m", "optimizer/v"), and in the
// metadata: format, Ember version, architecture (JSON), optimizer (JSON: name, iterations,
// hyper-parameters), epoch, seed and data-loader position, plus any caller-supplied keys.
//
// Writes are atomic: a temporary file in the same directory is written, fsync'ed and renamed
// over the target, so a crash never leaves a broken checkpoint where a good one was. Loading
// validates sizes, header, dtypes, offsets and every shape against the model before changing
// anything: a bad file throws CheckpointError and leaves the model as it was.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "../core/error.h"
#include "../core/tensor.h"

namespace ember {

class Sequential;

class CheckpointError : public IoError {
 public:
  using IoError::IoError;
};

// Where training stands, saved with the weights so a run can resume exactly.
struct TrainingState {
  int epochs_done = 0;       // completed epochs (the next fit starts at this epoch)
  int64_t batches_done = 0;  // batches done in the current epoch (0 at epoch boundaries)
  uint64_t seed = 0;
  int64_t batch_size = 0;
  std::map<std::string, std::string> extra{};  // free-form caller metadata
};

// A raw safetensors file: named tensors (F32 / I32 / U8) and metadata.
struct SafeTensors {
  std::vector<std::pair<std::string, Tensor>> tensors;
  std::map<std::string, std::string> metadata;
};

// Writes atomically (temp file + fsync + rename). Throws IoError on any failure; the target is
// then untouched. `fail_after_bytes` >= 0 simulates a crash after that many bytes (tests).
void write_safetensors(const std::string& path, const SafeTensors& st, int64_t fail_after_bytes = -1);
// Reads and validates a file; throws CheckpointError naming the file and what is wrong.
SafeTensors read_safetensors(const std::string& path);

// Model-level save/load (Sequential::save / Sequential::load call these).
void save_checkpoint(const Sequential& model, const std::string& path, const TrainingState& state = {});
// Loads parameters (and optimizer state when the model is compiled with the same optimizer)
// into a model built with the same architecture; returns the saved training state.
TrainingState load_checkpoint(Sequential& model, const std::string& path);

}  // namespace ember
