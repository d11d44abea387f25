// RMSprop's kernel: the update of ember::cpu::rmsprop_update on the device's stream.
#pragma once

#include <cstdint>

#include "../../core/cuda/context.h"

namespace ember::cuda {

// lr: on the device (f32).
void rmsprop_update(Context& ctx, float* params, const float* grads, float* v, int64_t n, const float* lr, float rho,
                    float epsilon);

}  // namespace ember::cuda
