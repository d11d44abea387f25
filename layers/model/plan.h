// A model's execution plan, made once at build from its topology: the steps a pass runs (each
// layer call on its own, and the rewrites found by pattern that run several calls as one fused
// step on the CPU), which layers compute an input gradient, which premask their output gradient
// with a ReLU's mask, and who reads each layer's output last. The passes (execute.h) walk the
// steps without knowing which kind they are. Knows the topology and the layers; Model owns one
// through its Executor.
//
// Adding a fusion: a Step subclass whose forward and backward equal its layers' (up to the order
// of float sums), and a rule in plan.cpp's kRewrites that returns one where the pattern fits.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "step.h"
#include "topology.h"

namespace ember::detail {

class ExecutionPlan {
 public:
  /// The decisions for `topo` (it sets the layers' input-gradient and ReLU-premask switches) and
  /// its steps: a step per layer and the rewrites that fit.
  void make(Topology& topo);
  /// The steps that run layers [begin, end): each rewrite starting in the range and ending inside
  /// it when `fuse` (the CPU runs the model and its fusion is on) and it is usable, else the
  /// layers' own steps. `out` is cleared first (it keeps its capacity).
  void steps(size_t begin, size_t end, bool fuse, std::vector<Step*>& out) const;
  /// Layer i's own step.
  Step& layer_step(size_t i) const { return *layer_steps_[i]; }
  /// The rewrite starting at layer i that would run in a pass over every layer (null where none).
  const Step* rewrite_at(size_t i, bool fuse) const;
  /// Per layer: the last layer (in run order) that reads its output; SIZE_MAX for an output layer
  /// (read after the pass: by the losses, predict, output(k)).
  const std::vector<size_t>& last_reader() const { return last_reader_; }

 private:
  std::vector<std::unique_ptr<Step>> layer_steps_;  // per layer
  std::vector<std::unique_ptr<Step>> rewrites_;     // per layer: the rewrite starting there, or null
  std::vector<size_t> last_reader_;
};

}  // namespace ember::detail
