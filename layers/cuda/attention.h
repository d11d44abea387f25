// Attention on the GPU: the contract of layers/cpu/attention.h, on the device's stream: cuBLAS
// strided-batched products over a sample's heads, the softmax rows a thread each
// (layers/attention_math.h, the CPU's formulas).
#pragma once

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"
#include "../attention_math.h"

namespace ember::cuda {

void attention_forward(Context& ctx, const ::ember::detail::AttentionShape& g, const Tensor& qkv, Tensor& probs,
                       Tensor& out);
void attention_backward(Context& ctx, const ::ember::detail::AttentionShape& g, const Tensor& qkv, const Tensor& probs,
                        const Tensor& dout, Tensor& dqkv, Tensor& scratch);

}  // namespace ember::cuda
