// Gradient accumulation (Model::accumulate_gradients): micro-batches' gradients, each scaled to its
// share of the whole batch's mean, added as the batch's pairwise tree (core/pairwise_sum.h), the
// order every weight gradient sums its 16-row groups in. Owns the tree's partial sums; on the
// gradients' device. Model owns one.
#pragma once

#include <cstdint>
#include <vector>

#include "../../core/pairwise_sum.h"
#include "../../core/tensor.h"

namespace ember::detail {

class GradientTree {
 public:
  /// grads * scale joins the tree (a copy: grads may change after) as the sum of `rows` rows: a
  /// subtree of that many 16-row groups where their count is a power of two.
  void add(const Tensor& grads, float scale, int64_t rows);
  /// grads = the sum of what was added since the last finish (ArgumentError when nothing was); returns
  /// how many were added, and empties the tree.
  int64_t finish(Tensor& grads);
  int64_t count() const { return count_; }  ///< added since the last finish

 private:
  PairwiseTree tree_;
  std::vector<Tensor> parts_;  // the subtrees' partial sums: a binary counter of them
  int64_t count_ = 0;
};

}  // namespace ember::detail
