// matmul: C = A B for 2-D f32 row-major tensors, the tf.matmul of the CPU-vs-GPU experiments.
// On the CPU it is oneDNN's sgemm.
#pragma once

#include "core/tensor.h"

namespace ember {

// c (M, N) = a (M, K) x b (K, N), written (=). Throws ShapeError on mismatched shapes.
void matmul(const Tensor& a, const Tensor& b, Tensor& c);
Tensor matmul(const Tensor& a, const Tensor& b);

}  // namespace ember
