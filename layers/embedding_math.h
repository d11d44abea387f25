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

}  // namespace ember::detail
