// Scaled dot-product attention over heads on the CPU, the core of MultiHeadAttention between its
// projections. qkv (N * T, W) row-major, W = H (2 Dk + Dv): each row holds the H heads' queries
// (head h at columns h Dk), then their keys (from H Dk), then their values (from 2 H Dk). out (N *
// T, H Dv): each row the heads' outputs side by side. probs (N * H, T, T): the softmax of each
// (sample, head), kept for the backward.
#pragma once

#include <cstdint>

#include "../../core/tensor.h"
#include "../attention_math.h"

namespace ember::cpu {

using detail::AttentionShape;

// Attention dropout (training): probability j of row i of (sample, head) b is kept when
// element_bits24(key, (b T + i) T + j) >= threshold and then scaled by `scale`: Dropout's mask of
// the probabilities tensor (N * H, T, T) (layers/random_bits.h), the GPU's by the Dropout kernel.
struct AttentionDropout {
  uint64_t key = 0;
  uint32_t threshold = 0;
  float scale = 1.0f;
};

// out = softmax(Q K^T / sqrt(Dk) (+ the causal mask)) V per (sample, head), the probabilities
// dropped first when `dropout` is given; probs written (before dropout). scratch: f32, sized here
// (two T x T blocks per thread, as the backward's with dropout; used only with dropout).
void attention_forward(const AttentionShape& g, const Tensor& qkv, Tensor& probs, Tensor& out, Tensor& scratch,
                       const AttentionDropout* dropout = nullptr);
// dqkv (N * T, W) written (=) from dout (N * T, H Dv), with the forward's `dropout`. scratch: f32,
// sized here (one T x T block per thread, two with dropout).
void attention_backward(const AttentionShape& g, const Tensor& qkv, const Tensor& probs, const Tensor& dout,
                        Tensor& dqkv, Tensor& scratch, const AttentionDropout* dropout = nullptr);

}  // namespace ember::cpu
