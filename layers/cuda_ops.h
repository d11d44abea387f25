// The layers' GPU ops as the CUDA module offers them (filled in layers/cuda/ops_table.cpp):
// the same contracts as their ember::cpu twins, on the stream of the tensors' device,
// activations row-major (NCHW). Layers reach them with layer_cuda_ops(). Private to the library.
#pragma once

#include <cstdint>
#include <string>

#include "../core/tensor.h"
#include "geometry.h"

namespace ember::detail {

struct LayerCudaOps {
  static constexpr const char* kOwner = "layers";
  void (*conv2d_forward)(const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y);
  void (*conv2d_backward)(const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy,
                          Tensor* dx, Tensor& dw, Tensor& db, bool dy_premasked);
  std::string (*conv2d_kernel_info)(int device, const Conv2dShape& g);
  void (*maxpool2d_forward)(const Pool2dShape& g, const Tensor& x, Tensor& y, Tensor* indices);
  void (*maxpool2d_backward)(const Pool2dShape& g, const Tensor& x, const Tensor& y, const Tensor& dy,
                             const Tensor* indices, Tensor& dx, bool relu_input);
  void (*dense_forward)(const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Tensor& y);
  void (*dense_backward)(const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy, bool relu, Tensor& dz,
                         Tensor* dx, Tensor& dw, Tensor& db);
  void (*matmul)(const Tensor& a, const Tensor& b, Tensor& c);
  void (*relu_forward)(const Tensor& x, Tensor& y);
  void (*relu_backward)(const Tensor& y, const Tensor& dy, Tensor& dx);
  void (*softmax_xent_backward)(const Tensor& probs, const Tensor& labels, Tensor& dlogits);
  int64_t (*count_correct)(const Tensor& logits, const Tensor& labels);
  void (*softmax_xent_accumulate)(const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& sums);
};

// The table, or DeviceError saying why there is none (no CUDA module, ...).
const LayerCudaOps& layer_cuda_ops();

}  // namespace ember::detail
