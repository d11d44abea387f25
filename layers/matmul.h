/// @file
/// matmul: C = A B for 2-D f32 row-major tensors, the tf.matmul of the CPU-vs-GPU experiments.
/// On the CPU it is oneDNN's sgemm; on a GPU (all three tensors there) cuBLAS's, FP32 unless
/// TF32 is allowed (set_allow_tf32). Inside a DeviceScope the operands are created there:
/// @code
///   DeviceScope gpu(Device::cuda(0));
///   Tensor c = matmul(Tensor::uniform(Shape{n, n}, -1, 1, 1), Tensor::uniform(Shape{n, n}, -1, 1, 2));
/// @endcode
#pragma once

#include "../core/tensor.h"

namespace ember {

/// c (M, N) = a (M, K) x b (K, N), written (=). Throws ShapeError on mismatched shapes.
void matmul(const Tensor& a, const Tensor& b, Tensor& c);
/// The same into a new row-major tensor c (M, N) on the operands' device.
Tensor matmul(const Tensor& a, const Tensor& b);

}  // namespace ember
