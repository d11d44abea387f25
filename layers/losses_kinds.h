/// @file
/// The built-in losses' and metrics' kernels as the backends see them: which formula, with what
/// parameter. Private to the library (losses and metrics are objects: layers/loss.h, metrics.h).
#pragma once

namespace ember::detail {

// Elementwise losses over outputs z and targets t of one shape; a sample's loss is the mean of
// its elements' (Keras' reduction). param: Huber's delta; BCE's label smoothing.
enum class PointLoss : int {
  SquaredError,            // (z - t)^2
  AbsoluteError,           // |z - t|
  Huber,                   // 0.5 e^2 when |e| <= delta, else delta (|e| - 0.5 delta)
  BinaryXentLogits,        // max(z, 0) - z t + log(1 + exp(-|z|))   (t smoothed first)
  BinaryXentProbabilities  // -(t log p + (1 - t) log(1 - p)), p clipped to [1e-7, 1 - 1e-7] as Keras
};

// Metrics: a per-sample value summed over the batch into one slot of the metric sums.
enum class MetricKind : int {
  SparseAccuracy,       // argmax(z) == label (first maximum wins), labels i32 (N)
  SparseTopK,           // fewer than k logits are greater than the label's (ties count in, as TF's in_top_k)
  CategoricalAccuracy,  // argmax(z) == argmax(t), t f32 (N, K)
  BinaryAccuracy,       // mean over elements of [(z > param) == t]; param: the threshold on z
  AbsoluteError,        // mean over elements of |z - t|
  SquaredError          // mean over elements of (z - t)^2
};

}  // namespace ember::detail
