// Attention on the GPU: the contract of layers/cpu/attention.h, on the device's stream: cuBLAS
// strided-batched products over a sample's heads, the softmax rows a thread each
// (layers/attention_math.h, the CPU's formulas).
#pragma once

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"
#include "../attention_math.h"

namespace ember::cuda {

// The forward: probs = softmax(Q K^T / sqrt(Dk) (+ the causal mask)), then out = probs V (probs
// here may be the dropped ones).
void attention_scores(Context& ctx, const ::ember::detail::AttentionShape& g, const Tensor& qkv, Tensor& probs);
void attention_values(Context& ctx, const ::ember::detail::AttentionShape& g, const Tensor& probs, const Tensor& qkv,
                      Tensor& out);
// The backward: dV = probs^T dout into dqkv and dP = dout V^T into dprobs (sized here), then, with
// the softmax's probs, dS in place of dprobs and dQ, dK into dqkv.
void attention_backward_values(Context& ctx, const ::ember::detail::AttentionShape& g, const Tensor& qkv,
                               const Tensor& probs, const Tensor& dout, Tensor& dqkv, Tensor& dprobs);
void attention_backward_scores(Context& ctx, const ::ember::detail::AttentionShape& g, const Tensor& qkv,
                               const Tensor& probs, Tensor& dprobs, Tensor& dqkv);

}  // namespace ember::cuda
