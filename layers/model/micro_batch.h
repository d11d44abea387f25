// How a CPU batch runs: whole, or as consecutive slices of at most rows() rows (Model's
// set_cpu_micro_batch says when and why). For a training batch the slices' gradients are added as
// the batch's pairwise tree (core/pairwise_sum.h), the order every CPU weight gradient sums its
// groups in and the all-reduce its replicas in; the metric sums count one batch however many
// slices ran. Owns the policy's setting, the slices' views of the caller's tensors and the tree's
// partial sums. Knows the topology (whether its layers' rows are independent, their sizes); Model
// owns one.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "../../core/pairwise_sum.h"
#include "../../core/tensor.h"
#include "../metrics.h"
#include "topology.h"

namespace ember::detail {

class MicroBatches {
 public:
  static constexpr int64_t kExactSliceRows = 16;  ///< rows per slice of a training batch under Exact
  /// At most `rows` rows per slice (0: whole batches; ArgumentError when negative), from now on
  /// whatever the batch's sizes.
  void set_rows(int64_t rows);
  int64_t rows() const { return rows_; }  ///< 64 by default

  /// Rows per slice for a batch of xs on `device` (training or inference): the batch's rows when it
  /// runs whole. `params`: the model's parameter count (by default, slices only pay where a slice's
  /// activations outweigh the parameters).
  int64_t rows_for(std::span<const Tensor> xs, bool training, Device device, const Topology& topo,
                   int64_t params) const;

  /// A training batch of xs and targets ys: step(xs, ys, mean_rows) once on the whole batch
  /// (mean_rows 0: its own rows) when `rows` is its row count, else on each slice of `rows` rows
  /// (mean_rows: the whole batch's n), after each of which the slice's gradients in `grads` join
  /// the tree; `grads` ends as the batch's sum. A sliced batch's views are kept until the next
  /// sliced batch or inference call.
  template <class StepFn>
  void train(std::span<const Tensor> xs, std::span<const Tensor> ys, int64_t rows, MetricSums& sums, Tensor& grads,
             StepFn&& step);
  /// An inference batch: pass(xs, ys) once, or on each slice; the slices' views are dropped after.
  template <class Pass>
  void evaluate(std::span<const Tensor> xs, std::span<const Tensor> ys, int64_t rows, MetricSums& sums, Pass&& pass);

  /// Rows [begin, begin + rows) of each of ts, as views held here until drop_views() (a predict's).
  std::span<const Tensor> inputs(std::span<const Tensor> ts, int64_t begin, int64_t rows);
  /// Drops the views of a caller's tensors: the model does not keep a caller's batch alive.
  void drop_views();
  /// drop_views() when an inference call ends, also by an exception.
  struct ViewsDropper {
    MicroBatches& m;
    ~ViewsDropper() { m.drop_views(); }
  };

  static int64_t batch_rows(std::span<const Tensor> xs) { return !xs.empty() && xs[0].rank() > 0 ? xs[0].dim(0) : 0; }

 private:
  static std::span<const Tensor> views(std::span<const Tensor> ts, int64_t begin, int64_t rows,
                                       std::vector<Tensor>& into);
  void begin_count(MetricSums& sums);  // the metric sums' count of finite batches before the slices
  void end_count(MetricSums& sums);    // ... plus one
  void add_slice(PairwiseTree& tree, const Tensor& grads);  // a slice's gradients into the tree
  void finish_tree(PairwiseTree& tree, Tensor& grads);      // grads = the tree's sum

  int64_t rows_ = 64;
  bool automatic_ = true;              // the default, not set_rows': slice only where it pays
  std::vector<Tensor> xs_, ys_;        // a slice's views of the inputs and targets
  std::vector<double> finite_before_;  // per block of the sums (scratch: a sliced step allocates nothing)
  std::vector<Tensor> tree_;           // the slices' partial sums: a binary counter of subtrees
};

template <class StepFn>
void MicroBatches::train(std::span<const Tensor> xs, std::span<const Tensor> ys, int64_t rows, MetricSums& sums,
                         Tensor& grads, StepFn&& step) {
  const int64_t n = batch_rows(xs);
  if (rows == n) {
    step(xs, ys, int64_t{0});
    return;
  }
  begin_count(sums);
  PairwiseTree tree;
  for (int64_t i = 0; i < n; i += rows) {
    const int64_t b = std::min(rows, n - i);
    step(views(xs, i, b, xs_), views(ys, i, b, ys_), n);  // the mean over the whole batch
    add_slice(tree, grads);
  }
  finish_tree(tree, grads);
  end_count(sums);
}

template <class Pass>
void MicroBatches::evaluate(std::span<const Tensor> xs, std::span<const Tensor> ys, int64_t rows, MetricSums& sums,
                            Pass&& pass) {
  const int64_t n = batch_rows(xs);
  if (rows == n) {
    pass(xs, ys);
    return;
  }
  const ViewsDropper drop{*this};  // the slices view the caller's batch: not kept after
  begin_count(sums);
  for (int64_t i = 0; i < n; i += rows) {
    const int64_t b = std::min(rows, n - i);
    pass(views(xs, i, b, xs_), views(ys, i, b, ys_));
  }
  end_count(sums);
}

}  // namespace ember::detail
