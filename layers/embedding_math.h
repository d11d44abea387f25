// Embedding's table gradient for one (vocabulary row, feature): the output gradient's values at
// the positions holding that id, added in the batch's sum order (core/pairwise_sum.h: groups of
// kBatchGroupRows positions, each group's values in order, the groups as the pairwise tree)
// with the groups that hold no such position left out (they would add zeros). Shared by the CPU
// (layers/cpu/embedding.cpp) and the CUDA kernel (layers/cuda/embedding.cu): the same sums.
// Private to the library.
#pragma once

#include <cstdint>

#include "../core/pairwise_sum.h"
#include "host_device.h"

namespace ember::detail {

// The sum over pos[0, k) (positions ascending, all in groups [g0, g0 + n)) of dy[pos * c + col],
// as the tree over those n groups; false (and *out untouched) when k == 0.
EMBER_HD inline bool embedding_grad_tree(const int32_t* pos, int64_t k, const float* dy, int64_t c, int64_t col,
                                         int64_t g0, int64_t n, float* out) {
  if (k == 0) return false;
  if (n == 1) {
    float s = dy[pos[0] * c + col];
    for (int64_t i = 1; i < k; ++i) s += dy[pos[i] * c + col];
    *out = s;
    return true;
  }
  int64_t left = 1;  // the largest power of two below n, as pairwise_sum splits
  while (left * 2 < n) left *= 2;
  const int64_t split = (g0 + left) * ::ember::kBatchGroupRows;  // the first position of the right part
  int64_t mid = 0;
  while (mid < k && pos[mid] < split) ++mid;
  float a = 0.0f, b = 0.0f;
  const bool has_a = embedding_grad_tree(pos, mid, dy, c, col, g0, left, &a);
  const bool has_b = embedding_grad_tree(pos + mid, k - mid, dy, c, col, g0 + left, n - left, &b);
  if (!has_a && !has_b) return false;
  *out = has_a && has_b ? a + b : (has_a ? a : b);
  return true;
}

// The same sum without recursion (a GPU thread's stack is small): the groups pushed in order onto
// core/pairwise_sum.h's binary counter of subtrees (PairwiseTree's tree, pairwise_sum's), a group
// that holds no such position an empty subtree that merges without an add. The same bits as
// embedding_grad_tree(pos, k, dy, c, col, 0, groups, ...); it visits every group, not only the
// id's. 0 when k == 0.
EMBER_HD inline float embedding_grad_counter(const int32_t* pos, int64_t k, const float* dy, int64_t c, int64_t col,
                                             int64_t groups) {
  float value[64] = {};
  bool full[64] = {};
  int level[64] = {};
  int size = 0;
  int64_t p = 0;
  const auto merge = [&](int into, int from) {
    if (full[from]) value[into] = full[into] ? value[into] + value[from] : value[from];
    full[into] = full[into] || full[from];
  };
  for (int64_t g = 0; g < groups; ++g) {
    float s = 0.0f;
    bool any = false;
    for (; p < k && pos[p] / ::ember::kBatchGroupRows == g; ++p) {
      s = any ? s + dy[pos[p] * c + col] : dy[pos[p] * c + col];
      any = true;
    }
    value[size] = s, full[size] = any, level[size] = 0, ++size;
    while (size >= 2 && level[size - 1] == level[size - 2]) {
      merge(size - 2, size - 1);
      --size;
      ++level[size - 1];
    }
  }
  for (; size >= 2; --size) merge(size - 2, size - 1);
  return size == 1 && full[0] ? value[0] : 0.0f;
}

}  // namespace ember::detail
