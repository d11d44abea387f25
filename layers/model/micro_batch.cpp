// A CPU batch in slices (see micro_batch.h).
#include "micro_batch.h"

#include <cmath>
#include <string>

#include "../../core/error.h"
#include "../../core/runtime.h"

namespace ember::detail {

// The Exact slices are the batch's sum groups (core/pairwise_sum.h): the slices' tree is the one
// every CPU weight gradient and the host all-reduce sum in.
static_assert(MicroBatches::kExactSliceRows == kBatchGroupRows);

void MicroBatches::set_rows(int64_t rows) {
  EMBER_CHECK(rows >= 0, ArgumentError, "Model::set_cpu_micro_batch: rows must be >= 0, got " + std::to_string(rows));
  rows_ = rows;
  automatic_ = false;
}

int64_t MicroBatches::rows_for(std::span<const Tensor> xs, bool training, Device device, const Topology& topo,
                               int64_t params) const {
  const int64_t n = batch_rows(xs);
  if (!device.is_cpu()) return n;
  for (const Tensor& x : xs)
    if (x.layout() != Layout::RowMajor || x.rank() == 0 || x.dim(0) != n) return n;  // run whole: forward checks
  const bool exact = training && conv_algorithms() == ConvAlgorithms::Exact;
  if (!exact && (rows_ == 0 || n <= rows_)) return n;
  for (const auto& l : topo.layers)
    if (!l->rows_independent(training)) return n;
  if (exact) return std::min(n, kExactSliceRows);
  if (automatic_) {
    // By default, slices only where a slice's activations outweigh the parameters: a CNN's
    // activations stay in cache; an MLP re-reading its weight matrices once per slice loses
    // (docs/benchmarks.md measures both).
    int64_t per_row = 0;
    for (const Shape& s : topo.output_shapes) per_row += s.numel();
    if (per_row * rows_ <= params) return n;
  }
  return rows_;
}

std::span<const Tensor> MicroBatches::views(std::span<const Tensor> ts, int64_t begin, int64_t rows,
                                            std::vector<Tensor>& into) {
  into.resize(ts.size());
  for (size_t k = 0; k < ts.size(); ++k) into[k] = ts[k].rows(begin, rows);
  return into;
}

std::span<const Tensor> MicroBatches::inputs(std::span<const Tensor> ts, int64_t begin, int64_t rows) {
  return views(ts, begin, rows, xs_);
}

void MicroBatches::drop_views() {
  xs_.clear();
  ys_.clear();
}

void MicroBatches::begin_count(MetricSums& sums) {
  finite_before_.clear();
  for (size_t k = 0; k < sums.blocks(); ++k) finite_before_.push_back(sums.block(k).buffer().data<double>()[3]);
}

void MicroBatches::end_count(MetricSums& sums) {
  for (size_t k = 0; k < sums.blocks(); ++k) {
    double* acc = sums.block(k).buffer().data<double>();
    acc[3] = finite_before_[k] + (std::isfinite(acc[0]) ? 1.0 : 0.0);
  }
}

namespace {
// Subtree `from` added into subtree `into` (the tree's partial sums, `count` floats each).
struct AddInto {
  std::vector<Tensor>& tree;
  int64_t count;
  void operator()(int64_t into, int64_t from) const {
    float* l = tree[size_t(into)].f32();
    const float* r = tree[size_t(from)].f32();
    for (int64_t e = 0; e < count; ++e) l[e] += r[e];
  }
};
}  // namespace

void MicroBatches::add_slice(PairwiseTree& tree, const Tensor& grads) {
  const size_t at = size_t(tree.next_slot());
  if (tree_.size() <= at) tree_.emplace_back();
  ensure(tree_[at], grads.shape(), DType::F32, grads.device());
  tree_[at].copy_from(grads);
  tree.push(AddInto{tree_, grads.numel()});
}

void MicroBatches::finish_tree(PairwiseTree& tree, Tensor& grads) {
  tree.finish(AddInto{tree_, grads.numel()});
  grads.copy_from(tree_[0]);
}

}  // namespace ember::detail
