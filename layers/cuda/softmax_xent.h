// Softmax cross-entropy and accuracy on the GPU: the contract of layers/cpu/softmax_xent.h.
// softmax_xent_forward returns the mean loss to the host, so it synchronises the stream;
// softmax_xent_accumulate (the training step's) adds the loss sum and the correct count to
// device-side sums instead and never waits for the device.
#pragma once

#include <cstdint>

#include "../../core/cuda/context.h"
#include "../../core/tensor.h"

namespace ember::cuda {

float softmax_xent_forward(Context& ctx, const Tensor& logits, const Tensor& labels, Tensor& probs);
// sums: 4 f64 {loss sum, correct, bad-label flag, batches while the loss sum was finite}
// (MetricSums in layers/metrics.h).
void softmax_xent_accumulate(Context& ctx, const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& sums,
                             int64_t positions = 1);
void softmax_xent_backward(Context& ctx, const Tensor& probs, const Tensor& labels, Tensor& dlogits, int64_t mean_rows);
// softmax_xent_accumulate then softmax_xent_backward, the same bits: one single-block kernel for
// up to kFusedXentRows rows (no scratch either), the two calls' three kernels above that.
inline constexpr int64_t kFusedXentRows = 4096;
void softmax_xent_accumulate_backward(Context& ctx, const Tensor& logits, const Tensor& labels, Tensor& probs,
                                      Tensor& sums, Tensor& dlogits, int64_t mean_rows, int64_t positions = 1);
int64_t count_correct(Context& ctx, const Tensor& logits, const Tensor& labels);

}  // namespace ember::cuda
