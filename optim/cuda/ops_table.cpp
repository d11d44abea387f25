// The optimizers' op table of the CUDA module (optim/cuda_ops.h).
#include "../cuda_ops.h"
#include "adam.h"
#include "regularize.h"
#include "rmsprop.h"
#include "sgd.h"

namespace ember::cuda {

const ::ember::detail::OptimCudaOps* optim_ops_table() {
  static const ::ember::detail::OptimCudaOps table = [] {
    ::ember::detail::OptimCudaOps a{};
    a.set_rate = [](int device, float* rate, float value) { set_rate(context(device), rate, value); };
    a.adam_advance = [](int device, double* scalars, const float* lr, double b1, double b2) {
      adam_advance(context(device), scalars, lr, b1, b2);
    };
    a.adam_update = [](int device, float* p, const float* g, float* m, float* v, int64_t n, const double* scalars,
                       float b1, float b2,
                       float eps) { adam_update(context(device), p, g, m, v, n, scalars, b1, b2, eps); };
    a.sgd_update = [](int device, float* p, const float* g, float* vel, int64_t n, const float* lr, float mu,
                      bool nesterov) { sgd_update(context(device), p, g, vel, n, lr, mu, nesterov); };
    a.rmsprop_update = [](int device, float* p, const float* g, float* v, int64_t n, const float* lr, float rho,
                          float eps) { rmsprop_update(context(device), p, g, v, n, lr, rho, eps); };
    a.clip_by_value = [](int device, float* g, int64_t n, float c) { clip_by_value(context(device), g, n, c); };
    a.clip_by_global_norm = [](int device, float* g, int64_t n, float c, double* scratch) {
      clip_by_global_norm(context(device), g, n, c, scratch);
    };
    a.decay = [](int device, float* p, const float* mask, int64_t n, const float* lr, float weight_decay) {
      decay(context(device), p, mask, n, lr, weight_decay);
    };
    a.adam_update_advance = [](int device, float* p, const float* g, float* m, float* v, int64_t n, double* scalars,
                               const float* lr, float b1, float b2, float eps) {
      adam_update_advance(context(device), p, g, m, v, n, scalars, lr, b1, b2, eps);
    };
    a.norm_scratch_doubles = kNormScratch;
    return a;
  }();
  return &table;
}

}  // namespace ember::cuda
