// Scaled dot-product attention's row formulas, shared by the CPU (layers/cpu/attention.cpp) and
// the CUDA kernels (layers/cuda/attention.cu): the softmax of one row of scores, in place, over its
// first `valid` entries (a causal row i sees keys 0..i; the others become exact zeros), and its
// backward. Private to the library.
#pragma once

#include <math.h>

#include <cstdint>

#include "host_device.h"
#include "losses_math.h"

namespace ember::detail {

// The geometry of one attention call: samples, steps, heads, key and value widths, causality.
struct AttentionShape {
  int64_t n = 0, t = 0, heads = 0, key_dim = 0, value_dim = 0;
  bool causal = false;
  int64_t width() const { return heads * (2 * key_dim + value_dim); }  // qkv's columns
};

// s[0, t) = softmax(s[0, valid)) followed by zeros: every row softmax's formula (softmax_row, in
// place: each score is read before its probability is written).
EMBER_HD inline void attention_softmax_row(float* s, int64_t t, int64_t valid) {
  int64_t best = 0;
  softmax_row(s, s, valid, &best);
  for (int64_t j = valid; j < t; ++j) s[j] = 0.0f;
}

// In place, from the probabilities p and the gradient dp of one row: dp[j] = scale p[j] (dp[j] -
// sum_k p[k] dp[k]), the dot product in double (masked entries, p = 0, stay exact zeros).
EMBER_HD inline void attention_softmax_backward_row(const float* p, float* dp, int64_t t, float scale) {
  double dot = 0.0;
  for (int64_t j = 0; j < t; ++j) dot += static_cast<double>(p[j]) * dp[j];
  const float d = static_cast<float>(dot);
  for (int64_t j = 0; j < t; ++j) dp[j] = scale * (p[j] * (dp[j] - d));
}

}  // namespace ember::detail
