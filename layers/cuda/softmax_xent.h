// Softmax cross-entropy and accuracy on the GPU: the contract of layers/cpu/softmax_xent.h.
// The forward returns the mean loss to the host, so it synchronises the stream (a device-side
// loss for graph capture comes with the training step on the GPU).
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "layers/cuda/context.h"

namespace ember::cuda {

float softmax_xent_forward(Context& ctx, const Tensor& logits, const Tensor& labels, Tensor& probs);
void softmax_xent_backward(Context& ctx, const Tensor& probs, const Tensor& labels, Tensor& dlogits);
int64_t count_correct(Context& ctx, const Tensor& logits, const Tensor& labels);

}  // namespace ember::cuda
