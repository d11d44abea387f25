// The accumulated gradients' tree (accumulation.h), on either backend's elementwise ops.
#include "accumulation.h"

#include "../../core/error.h"
#include "../ops/elementwise.h"

namespace ember::detail {

namespace {
struct AddInto {
  std::vector<Tensor>& parts;
  void operator()(int64_t into, int64_t from) const {
    elementwise_binary(BinaryOp::Add, parts[size_t(into)], parts[size_t(from)], parts[size_t(into)]);
  }
};
}  // namespace

void GradientTree::add(const Tensor& grads, float scale, int64_t rows) {
  const size_t at = size_t(tree_.next_slot());
  if (parts_.size() <= at) parts_.emplace_back();
  ensure(parts_[at], grads.shape(), DType::F32, grads.device());
  if (scale == 1.0f)
    parts_[at].copy_from(grads);
  else
    elementwise_scale(scale, grads, parts_[at]);
  const int64_t groups = batch_groups(rows);
  int level = 0;
  if (rows % kBatchGroupRows == 0 && groups > 0 && (groups & (groups - 1)) == 0)
    while ((int64_t{1} << level) < groups) ++level;
  tree_.push(AddInto{parts_}, level);
  ++count_;
}

int64_t GradientTree::finish(Tensor& grads) {
  EMBER_CHECK(count_ > 0, ArgumentError, "finish_accumulation: no micro-batch was accumulated");
  tree_.finish(AddInto{parts_});
  grads.copy_from(parts_[0]);
  const int64_t n = count_;
  tree_ = PairwiseTree{};
  count_ = 0;
  return n;
}

}  // namespace ember::detail
