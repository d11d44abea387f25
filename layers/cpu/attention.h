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

// out = softmax(Q K^T / sqrt(Dk) (+ the causal mask)) V per (sample, head); probs written.
void attention_forward(const AttentionShape& g, const Tensor& qkv, Tensor& probs, Tensor& out);
// dqkv (N * T, W) written (=) from dout (N * T, H Dv). scratch: f32, sized here (a T x T block per
// thread).
void attention_backward(const AttentionShape& g, const Tensor& qkv, const Tensor& probs, const Tensor& dout,
                        Tensor& dqkv, Tensor& scratch);

}  // namespace ember::cpu
