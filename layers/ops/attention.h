// Attention's dispatch (the core between MultiHeadAttention's projections): qkv rows in, the heads'
// outputs out, on either backend; qkv and the probabilities kept in `state` for the backward.
// Private to the library.
#pragma once

#include <memory>

#include "../../core/tensor.h"
#include "../attention_math.h"
#include "../layer.h"
#include "../random_bits.h"

namespace ember::detail {

// Attention dropout for one training forward: the layer's constants and its step counter (advanced
// here), as Dropout's (layers/random_bits.h).
struct AttentionDropoutStep {
  DropoutParams params;
  Tensor* counter = nullptr;
};

// out (N * T, H Dv) from qkv (N * T, H (2 Dk + Dv)) (layers/cpu/attention.h), the probabilities
// dropped when `dropout` is given.
const Tensor& attention_forward(std::unique_ptr<OpState>& state, const AttentionShape& g, const Tensor& qkv,
                                const AttentionDropoutStep* dropout = nullptr);
// dqkv from dout, after a forward on the same state (with its dropout).
const Tensor& attention_backward(std::unique_ptr<OpState>& state, const Tensor& dout);

}  // namespace ember::detail
