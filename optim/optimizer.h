// Optimizer: updates the model's one flat parameter buffer from its one flat gradient buffer.
// State (Adam's m and v, SGD's velocity) is flat too, so a step is one fused loop and a
// checkpoint is a few buffers.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "../core/tensor.h"

namespace ember {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual std::string name() const = 0;
  // One update: params -= f(grads, state). Both f32, same element count, same device.
  virtual void step(Tensor& params, const Tensor& grads) = 0;
  // The host's part of a step whose device work ran without step(): a replay of a captured CUDA
  // graph containing one (CudaGraph). Counts the iteration; step-dependent values of the update
  // must already be on the device (Adam's are).
  virtual void count_step() { ++iterations_; }
  virtual float learning_rate() const = 0;
  virtual void set_learning_rate(float lr) = 0;
  // Named state buffers (allocated on the first step) and hyper-parameters, for checkpoints.
  virtual std::vector<std::pair<std::string, Tensor>> state() const = 0;
  // Restores one state buffer by name (checkpoints); throws ArgumentError for an unknown name.
  virtual void set_state(const std::string& name, const Tensor& values) = 0;
  virtual std::vector<std::pair<std::string, double>> hyperparameters() const = 0;
  int64_t iterations() const { return iterations_; }
  void set_iterations(int64_t n) {
    iterations_ = n;
    ++state_version_;
  }
  // Changes whenever the state is replaced from outside (set_iterations, set_state): a captured
  // CUDA graph of a step reads the old buffers and counts, so fit captures it again.
  int64_t state_version() const { return state_version_; }
  // Unique per optimizer object in this process (never reused, unlike an address).
  uint64_t id() const { return id_; }

 protected:
  // Validates a step's arguments and allocates `state` buffers (zeros) on first use.
  void prepare(const Tensor& params, const Tensor& grads, std::vector<Tensor*> state);
  // Copies `values` (f32, flat) into `slot`, allocating it.
  void restore(Tensor& slot, const Tensor& values);
  int64_t iterations_ = 0;
  int64_t state_version_ = 0;  // bumped by restore() and set_iterations()

 private:
  static uint64_t next_id();
  uint64_t id_ = next_id();
};

}  // namespace ember
