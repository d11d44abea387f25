// SGD with momentum on the CPU: the twin of optim/cuda/sgd.h.
#pragma once

#include <cstdint>

namespace ember::cpu {

// velocity = momentum * velocity - lr * g;  p += velocity  (Nesterov: p += momentum * velocity - lr * g)
void sgd_update(float* params, const float* grads, float* velocity, int64_t n, float lr, float momentum, bool nesterov);

}  // namespace ember::cpu
