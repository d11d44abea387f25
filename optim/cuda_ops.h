// The optimizers' GPU updates as the CUDA module offers them (filled in optim/cuda/ops_table.cpp):
// the fused loops of optim/cpu on the stream of `device`. Private to the library.
#pragma once

#include <cstdint>

namespace ember::detail {

struct OptimCudaOps {
  static constexpr const char* kOwner = "optim";
  void (*adam_update)(int device, float* p, const float* g, float* m, float* v, int64_t n, float lr_t, float beta1,
                      float beta2, float epsilon);
  void (*sgd_update)(int device, float* p, const float* g, float* velocity, int64_t n, float lr, float momentum,
                     bool nesterov);
};

// The table, or DeviceError saying why there is none.
const OptimCudaOps& optim_cuda_ops();

}  // namespace ember::detail
