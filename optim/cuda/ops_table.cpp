// The optimizers' op table of the CUDA module (optim/cuda_ops.h).
#include "../cuda_ops.h"
#include "adam.h"
#include "sgd.h"

namespace ember::cuda {

const ::ember::detail::OptimCudaOps* optim_ops_table() {
  static const ::ember::detail::OptimCudaOps table = [] {
    ::ember::detail::OptimCudaOps a{};
    a.adam_update = [](int device, float* p, const float* g, float* m, float* v, int64_t n, float lr_t, float b1,
                       float b2, float eps) { adam_update(context(device), p, g, m, v, n, lr_t, b1, b2, eps); };
    a.sgd_update = [](int device, float* p, const float* g, float* vel, int64_t n, float lr, float mu, bool nesterov) {
      sgd_update(context(device), p, g, vel, n, lr, mu, nesterov);
    };
    return a;
  }();
  return &table;
}

}  // namespace ember::cuda
