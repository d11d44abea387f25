// The optimizers' GPU updates as the CUDA module offers them (filled in optim/cuda/ops_table.cpp):
// the fused loops of optim/cpu on the stream of `device`. Private to the library.
#pragma once

#include <cstdint>

namespace ember::detail {

struct OptimCudaOps {
  static constexpr const char* kOwner = "optim";
  // The learning rate lives on the device (f32; every update below reads it there), so a captured
  // step follows a schedule: set_rate writes it, queued on the stream, no host wait.
  void (*set_rate)(int device, float* rate, float value);
  // Adam's per-step scalars live on the device (a captured step replays them): `scalars` is
  // f64 {t, lr_t}; adam_advance sets t += 1 and lr_t = lr sqrt(1 - b2^t) / (1 - b1^t) there, in
  // double as the CPU path does on the host, and adam_update reads lr_t.
  void (*adam_advance)(int device, double* scalars, const float* lr, double beta1, double beta2);
  void (*adam_update)(int device, float* p, const float* g, float* m, float* v, int64_t n, const double* scalars,
                      float beta1, float beta2, float epsilon);
  void (*sgd_update)(int device, float* p, const float* g, float* velocity, int64_t n, const float* lr, float momentum,
                     bool nesterov);
  // RMSprop (optim/rmsprop.h): v = rho v + (1 - rho) g^2; p -= lr g / sqrt(v + epsilon).
  void (*rmsprop_update)(int device, float* p, const float* g, float* v, int64_t n, const float* lr, float rho,
                         float epsilon);
  // Regularization (optim/cuda/regularize.h): scratch holds kNormScratch doubles.
  void (*clip_by_value)(int device, float* g, int64_t n, float c);
  void (*clip_by_global_norm)(int device, float* g, int64_t n, float c, double* scratch);
  void (*decay)(int device, float* p, const float* mask, int64_t n, const float* lr, float weight_decay);
  // adam_advance then adam_update as one launch whose last block advances {t, lr_t} (fused_advance();
  // the same bits as the two calls).
  void (*adam_update_advance)(int device, float* p, const float* g, float* m, float* v, int64_t n, double* scalars,
                              const float* lr, float beta1, float beta2, float epsilon);
  int64_t norm_scratch_doubles;
};

// The table, or DeviceError saying why there is none.
const OptimCudaOps& optim_cuda_ops();

}  // namespace ember::detail
