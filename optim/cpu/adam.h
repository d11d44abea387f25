// The fused Adam loop on the CPU: the twin of optim/cuda/adam.h.
#pragma once

#include <cstdint>

namespace ember::cpu {

// One pass over n elements: m, v and the parameters updated in place; lr_t is the
// bias-corrected step size (optim/adam.h).
void adam_update(float* params, const float* grads, float* m, float* v, int64_t n, float lr_t, float beta1, float beta2,
                 float epsilon);

}  // namespace ember::cpu
