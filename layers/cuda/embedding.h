// Embedding on the GPU: the contract of layers/cpu/embedding.h, on the device's stream. The
// forward waits for the device to report an id outside the vocabulary (then ArgumentError).
#pragma once

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"

namespace ember::cuda {

void embedding_forward(Context& ctx, const Tensor& ids, const Tensor& table, Tensor& y);
void embedding_backward(Context& ctx, const Tensor& ids, const Tensor& dy, Tensor& dtable, Tensor& scratch);

}  // namespace ember::cuda
