// The passes over a model's layer calls: forward over the plan's steps (plan.h), handing each
// step's output to its readers, and backward in reverse, handing each input gradient to its
// producer's slot (several consumers' gradients summed in the first one's layout) and adding a
// shared layer's later calls' gradients to its first call's. Owns the plan, the activations and
// gradients a pass hands on and what an inference pass holds. Knows the topology, the plan and
// the layers; Model owns one and plans it at build.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "../../core/tensor.h"
#include "plan.h"

namespace ember::detail {

class Executor {
 public:
  /// At build: the plan for `topo` and the passes' slots. The topology must outlive the executor's
  /// use (Model owns both and moves them together).
  void plan(Topology& topo);
  const ExecutionPlan& execution_plan() const { return plan_; }

  /// Layers [begin, end) on xs: the model's inputs when begin is 0, else (a stack) layer begin - 1's
  /// output; returns the last layer's output (xs[0] for an empty range). Checks the range and the
  /// inputs' shapes and `device` (the model's), naming `what` ("Model::<what>: ..."). `fuse`: run
  /// the plan's rewrites (the model is on the CPU and its fusion is on). `release`: an inference
  /// pass that frees as it goes: each step hands its output to the executor and drops its buffers,
  /// and an output no later layer of the pass reads is dropped once its last reader has run (the
  /// outputs and the last layer's stay until the next pass).
  const Tensor& forward(std::span<const Tensor> xs, bool training, size_t begin, size_t end, const char* what,
                        Device device, bool fuse, bool release);
  /// One seed: the gradient of layer end - 1's output; several: of each output layer's, in output
  /// order. Runs the steps the last forward ran, in reverse; returns input 0's gradient (see
  /// input_gradient). Freezing (Layer::set_trainable): a step below which nothing trains (no
  /// parameters of its own or earlier that train, no input gradient asked for) does not run, a
  /// layer computes its input gradient only where something before it trains, and a frozen layer's
  /// gradients are zero after the pass. ArgumentError for a range that splits a step that ran as one, or that holds
  /// one call of a shared layer but not another.
  const Tensor& backward(std::span<const Tensor* const> seeds, size_t begin, size_t end);
  /// After backward: model input k's gradient when every layer reading it computed one, else undefined.
  const Tensor& input_gradient(size_t k) const;
  /// Layer i's output from the last forward that ran it (null before any did, or when it ran inside
  /// a step: it never exists).
  const Tensor* output_of(size_t i) const { return i < acts_.size() ? acts_[i] : nullptr; }
  /// What the losses read after a forward that gave `last`: a one-output model's `last` (its loss
  /// may read a final Softmax's input), else every output layer's output, in output order.
  std::span<const Tensor* const> loss_inputs(const Tensor& last);
  /// An inference pass: layer i's output `y`, computed after the pass (a final Softmax run for the
  /// metrics), moves to the executor, and the layer drops its buffers.
  void hold(size_t i, const Tensor& y);

 private:
  const Tensor& input_of(size_t i, size_t k, std::span<const Tensor> xs, size_t begin) const;
  void check_inputs(std::span<const Tensor> xs, size_t begin, const char* what, Device device) const;
  void hand_on(const Step& s);                  // an inference pass: s's output to held_, inputs dropped
  void deliver(size_t slot, const Tensor& dx);  // dx to a gradient slot (summed with what is there)
  void add_twin_gradients(size_t begin, size_t end);
  void mark_gradient_flow();  // freezing: flows_ and the layers' input-gradient switches for this pass

  Topology* topo_ = nullptr;
  ExecutionPlan plan_;
  std::vector<Step*> steps_;              // the last forward's steps (a pass's scratch)
  std::vector<Step*> ran_;                // per layer: the step that ran it in the last forward
  std::vector<const Tensor*> inputs_;     // a step's inputs (scratch)
  std::vector<const Tensor*> losses_in_;  // loss_inputs' list
  // Per layer: its output (forward); per gradient slot (the layers' outputs, then the model's
  // inputs): the gradient handed to it, the sum of several, a conversion to the first one's layout.
  std::vector<const Tensor*> acts_, gouts_;
  std::vector<Tensor> gsums_, gconv_;
  std::vector<bool> input_whole_;  // per model input: its gradient in gouts_ is whole
  std::vector<bool> flows_;        // per layer: a gradient must reach its output (it or a layer before it trains)
  std::vector<Tensor> held_;       // an inference pass's outputs, held here (see forward)
  bool holding_ = false;           // held_ holds something
};

}  // namespace ember::detail
