// RMSprop on the CPU: the twin of optim/cuda/rmsprop.h.
#pragma once

#include <cstdint>

namespace ember::cpu {

// v = rho v + (1 - rho) g^2;  p -= lr g / sqrt(v + epsilon)   (Keras' RMSprop, not centered)
void rmsprop_update(float* params, const float* grads, float* v, int64_t n, float lr, float rho, float epsilon);

}  // namespace ember::cpu
