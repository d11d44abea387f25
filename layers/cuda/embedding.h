// Embedding on the GPU: the contract of layers/cpu/embedding.h, on the device's stream. With
// `check_ids` the forward waits for the device to report an id outside the vocabulary (then
// ArgumentError), except while the stream is being captured into a CUDA graph (where waiting is
// not allowed): there, as without the check, such an id gives a row of zeros.
#pragma once

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"

namespace ember::cuda {

void embedding_forward(Context& ctx, const Tensor& ids, const Tensor& table, Tensor& y, bool check_ids = true);
void embedding_backward(Context& ctx, const Tensor& ids, const Tensor& dy, Tensor& dtable, Tensor& scratch);

}  // namespace ember::cuda
