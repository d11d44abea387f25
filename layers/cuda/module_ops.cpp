// The op entries of the CUDA module's table (core/cuda_module.h): each finds the context of
// its tensors' device and calls the op. Also the module's one exported entry point.
#include "../../core/cuda/check.h"
#include "../../core/cuda_module.h"
#include "context.h"
#include "conv2d.h"
#include "dense.h"
#include "maxpool2d.h"
#include "relu.h"
#include "softmax_xent.h"
#include "../../core/cuda/elementwise.h"
#include "../../data/cuda/gather.h"
#include "../../distribute/cuda/nccl.h"
#include "../../optim/cuda/adam.h"
#include "../../optim/cuda/sgd.h"

namespace ember::cuda {

// From core/cuda/memory.cpp: the memory and status part of the table.
void fill_memory_entries(::ember::detail::CudaModuleApi& api);

namespace {
Context& ctx_of(const Tensor& t) {
  EMBER_CHECK(t.device().is_cuda(), DeviceError, "a CUDA op got a tensor on " + t.device().str());
  return context(t.device().index);
}

}  // namespace

const ::ember::detail::CudaModuleApi& api() {
  static const ::ember::detail::CudaModuleApi table = [] {
    ::ember::detail::CudaModuleApi a{};
    fill_memory_entries(a);
    fill_nccl_entries(a);
    a.conv2d_forward = [](const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
      conv2d_forward(ctx_of(x), g, x, w, b, y);
    };
    a.conv2d_backward = [](const Conv2dShape& g, const Tensor& x, const Tensor& w, const Tensor& y, const Tensor& dy,
                           Tensor* dx, Tensor& dw, Tensor& db, bool premasked) {
      conv2d_backward(ctx_of(x), g, x, w, y, dy, dx, dw, db, premasked);
    };
    a.conv2d_kernel_info = [](int device, const Conv2dShape& g) { return conv2d_kernel_info(context(device), g); };
    a.maxpool2d_forward = [](const Pool2dShape& g, const Tensor& x, Tensor& y) { maxpool2d_forward(ctx_of(x), g, x, y); };
    a.maxpool2d_backward = [](const Pool2dShape& g, const Tensor& x, const Tensor& y, const Tensor& dy, Tensor& dx,
                              bool relu_input) { maxpool2d_backward(ctx_of(x), g, x, y, dy, dx, relu_input); };
    a.dense_forward = [](const Tensor& x, const Tensor& w, const Tensor& b, bool relu, Tensor& y) {
      dense_forward(ctx_of(x), x, w, b, relu, y);
    };
    a.dense_backward = [](const Tensor& x, const Tensor& w, const Tensor& y, Tensor& dy, bool relu, Tensor* dx,
                          Tensor& dw, Tensor& db) { dense_backward(ctx_of(x), x, w, y, dy, relu, dx, dw, db); };
    a.matmul = [](const Tensor& x, const Tensor& w, Tensor& y) { matmul(ctx_of(x), x, w, y); };
    a.relu_forward = [](const Tensor& x, Tensor& y) { relu_forward(ctx_of(x), x, y); };
    a.relu_backward = [](const Tensor& y, const Tensor& dy, Tensor& dx) { relu_backward(ctx_of(y), y, dy, dx); };
    a.softmax_xent_forward = [](const Tensor& z, const Tensor& y, Tensor& p) {
      return softmax_xent_forward(ctx_of(z), z, y, p);
    };
    a.softmax_xent_backward = [](const Tensor& p, const Tensor& y, Tensor& d) {
      softmax_xent_backward(ctx_of(p), p, y, d);
    };
    a.count_correct = [](const Tensor& z, const Tensor& y) { return count_correct(ctx_of(z), z, y); };
    a.adam_update = [](int device, float* p, const float* g, float* m, float* v, int64_t n, float lr_t, float b1,
                       float b2, float eps) { adam_update(context(device), p, g, m, v, n, lr_t, b1, b2, eps); };
    a.softmax_xent_accumulate = [](const Tensor& z, const Tensor& y, Tensor& p, Tensor& sums) {
      softmax_xent_accumulate(ctx_of(z), z, y, p, sums);
    };
    a.sgd_update = [](int device, float* p, const float* g, float* vel, int64_t n, float lr, float mu, bool nesterov) {
      sgd_update(context(device), p, g, vel, n, lr, mu, nesterov);
    };
    a.fill = [](Tensor& t, float value) {
      EMBER_CHECK(t.dtype() == DType::F32, ArgumentError, "fill: f32 only, got " + t.str());
      fill(ctx_of(t), static_cast<float*>(t.raw()), t.numel(), value);
    };
    a.scale = [](Tensor& t, float factor) {
      EMBER_CHECK(t.dtype() == DType::F32, ArgumentError, "scale: f32 only, got " + t.str());
      scale(ctx_of(t), static_cast<float*>(t.raw()), t.numel(), factor);
    };
    a.gather_batch = [](const Tensor& images, const Tensor& labels, const Tensor& order, int64_t offset,
                        int64_t count, Tensor& x, Tensor& y) {
      gather_batch(ctx_of(images), images, labels, order, offset, count, x, y);
    };
    a.synchronize = [](int device) { context(device).synchronize(); };
    return a;
  }();
  return table;
}

}  // namespace ember::cuda

// The module's one entry point (see core/cuda_module.h).
extern "C" __attribute__((visibility("default"))) const ember::detail::CudaModuleApi* ember_cuda_api_v1() {
  return &ember::cuda::api();
}
