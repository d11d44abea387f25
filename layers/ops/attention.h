// Attention's dispatch (the core between MultiHeadAttention's projections): qkv rows in, the heads'
// outputs out, on either backend; qkv and the probabilities kept in `state` for the backward.
// Private to the library.
#pragma once

#include <memory>

#include "../../core/tensor.h"
#include "../attention_math.h"
#include "../layer.h"

namespace ember::detail {

// out (N * T, H Dv) from qkv (N * T, H (2 Dk + Dv)) (layers/cpu/attention.h).
const Tensor& attention_forward(std::unique_ptr<OpState>& state, const AttentionShape& g, const Tensor& qkv);
// dqkv from dout, after a forward on the same state.
const Tensor& attention_backward(std::unique_ptr<OpState>& state, const Tensor& dout);

}  // namespace ember::detail
