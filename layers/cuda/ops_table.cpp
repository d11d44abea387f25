// The layers' op table of the CUDA module (layers/cuda_ops.h): each entry finds the context of
// its tensors' device and calls the op.
#include "../../core/cuda/check.h"
#include "../../core/cuda/context.h"
#include "../cuda_ops.h"
#include "conv2d.h"
#include "dense.h"
#include "maxpool2d.h"
#include "relu.h"
#include "softmax_xent.h"

namespace ember::cuda {

const ::ember::detail::LayerCudaOps* layer_ops_table() {
  static const ::ember::detail::LayerCudaOps table = [] {
    ::ember::detail::LayerCudaOps a{};
    a.conv2d_forward = [](const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
      conv2d_forward(context_of(x), g, x, w, b, y);
    };
    a.conv2d_backward = [](const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy,
                           Tensor* dx, Tensor& dw, Tensor& db,
                           bool premasked) { conv2d_backward(context_of(x), g, x, w, y, dy, dx, dw, db, premasked); };
    a.conv2d_kernel_info = [](int device, const Conv2dShape& g) { return conv2d_kernel_info(context(device), g); };
    a.maxpool2d_forward = [](const Pool2dShape& g, const Tensor& x, Tensor& y, Tensor* indices) {
      maxpool2d_forward(context_of(x), g, x, y, indices);
    };
    a.maxpool2d_backward = [](const Pool2dShape& g, const Tensor& x, const Tensor& y, const Tensor& dy,
                              const Tensor* indices, Tensor& dx, bool relu_input) {
      maxpool2d_backward(context_of(x), g, x, y, dy, indices, dx, relu_input);
    };
    a.dense_forward = [](const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Tensor& y) {
      dense_forward(context_of(x), x, w, b, relu, y);
    };
    a.dense_backward = [](const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy, bool relu, Tensor& dz,
                          Tensor* dx, Tensor& dw,
                          Tensor& db) { dense_backward(context_of(x), x, w, y, dy, relu, dz, dx, dw, db); };
    a.matmul = [](const Tensor& x, const Tensor& w, Tensor& y) { matmul(context_of(x), x, w, y); };
    a.relu_forward = [](const Tensor& x, Tensor& y) { relu_forward(context_of(x), x, y); };
    a.relu_backward = [](const Tensor& y, const Tensor& dy, Tensor& dx) { relu_backward(context_of(y), y, dy, dx); };
    a.softmax_xent_backward = [](const Tensor& p, const Tensor& y, Tensor& d) {
      softmax_xent_backward(context_of(p), p, y, d);
    };
    a.count_correct = [](const Tensor& z, const Tensor& y) { return count_correct(context_of(z), z, y); };
    a.softmax_xent_accumulate = [](const Tensor& z, const Tensor& y, Tensor& p, Tensor& sums) {
      softmax_xent_accumulate(context_of(z), z, y, p, sums);
    };
    return a;
  }();
  return &table;
}

}  // namespace ember::cuda
