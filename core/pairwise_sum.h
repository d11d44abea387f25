// The one order in which Ember adds up a CPU batch's gradient (docs/architecture.md, Numerics):
// the batch's rows in groups of kBatchGroupRows, each group's gradient summed on its own, and the
// groups' float sums added as a pairwise tree by doubling strides ((g0 + g1) + (g2 + g3), ...; for
// 3 groups (g0 + g1) + g2). Conv2D's and Dense's CPU weight gradients sum in it, a Model sums its
// slices in it (compute_gradients) and the host all-reduce sums its replicas in it
// (local_communicator.cpp). So a replica whose share of the batch is an aligned power-of-two number
// of groups sums a subtree of the one model's tree, and data-parallel replicas compute the one
// model's gradient bit for bit wherever each group's sums do not depend on the thread count
// (Ember's kernels; oneDNN's weight gradient's may: docs/architecture.md, Numerics).
// BatchNormalization's parameter gradients are not in it: its statistics are per replica anyway.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ember {

inline constexpr int64_t kBatchGroupRows = 16;

// The groups of a batch of n rows (the last one partial when kBatchGroupRows does not divide n).
inline int64_t batch_groups(int64_t n) { return (n + kBatchGroupRows - 1) / kBatchGroupRows; }

// Element i's pairwise sum over the n parts [first, first + n), part j read as at(j, i): the tree
// above.
template <typename At>
float pairwise_sum(int64_t first, int64_t n, int64_t i, const At& at) {
  if (n <= 1) return n == 1 ? at(first, i) : 0.0f;
  int64_t left = 1;  // the largest power of two below n: the doubling strides' split
  while (left * 2 < n) left *= 2;
  return pairwise_sum(first, left, i, at) + pairwise_sum(first + left, n - left, i, at);
}

// The same tree built as the parts arrive in order, as a binary counter of subtrees: each part is
// pushed as a subtree of level 0, two subtrees of one level merge (left += right) into one of the
// next, and what is left at the end folds from the right. Slots hold the subtrees: the next part
// is written into slot next_slot(), then push() merges; after the last part finish() leaves the
// sum in slot 0. At most slots_for(parts) slots are used. `add(into, from)`: slot into += slot from.
class PairwiseTree {
 public:
  static int64_t slots_for(int64_t parts) {
    int64_t slots = 1;
    while (parts > 1) parts = (parts + 1) / 2, ++slots;
    return slots + 1;
  }
  int64_t next_slot() const { return size_; }
  // `level`: the new part is already a subtree of 2^level parts (a micro-batch of 2^level 16-row
  // groups), so that it merges where those parts would have. A part larger than the subtree before
  // it (not aligned: no bit-for-bit promise then) counts at that subtree's level, so that the
  // levels on the stack stay decreasing and it holds at most 64 of them.
  template <typename Add>
  void push(const Add& add, int level = 0) {
    if (size_ > 0) level = std::min(level, level_[size_ - 1]);
    level_[size_++] = level;
    while (size_ >= 2 && level_[size_ - 1] == level_[size_ - 2]) {
      add(size_ - 2, size_ - 1);
      --size_;
      ++level_[size_ - 1];
    }
  }
  template <typename Add>
  void finish(const Add& add) {
    for (; size_ >= 2; --size_) add(size_ - 2, size_ - 1);
  }

 private:
  int level_[64] = {};
  int64_t size_ = 0;
};

// In place: elements [e0, e1) of part 0 = their pairwise sum over the n parts at parts + j *
// stride (the same tree as pairwise_sum, as strides doubling: part j += part j + s for s = 1, 2,
// 4, ..., j a multiple of 2s). The other parts' elements are overwritten. On the calling thread.
inline void pairwise_reduce_range(float* parts, int64_t n, int64_t stride, int64_t e0, int64_t e1) {
  for (int64_t s = 1; s < n; s *= 2)
    for (int64_t j = 0; j + s < n; j += 2 * s) {
      float* to = parts + j * stride;
      const float* from = parts + (j + s) * stride;
      for (int64_t e = e0; e < e1; ++e) to[e] += from[e];
    }
}

// The same for the elements [0, count), the threads splitting them when called outside a
// parallel region: the same bits at any thread count.
void pairwise_reduce(float* parts, int64_t n, int64_t count, int64_t stride);

}  // namespace ember
