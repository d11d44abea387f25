// SGD with momentum on the GPU: the same update as the CPU loop in optim/sgd.cpp.
#pragma once

#include <cstdint>

#include "../../core/cuda/context.h"

namespace ember::cuda {

// lr: on the device (f32), read by every thread.
void sgd_update(Context& ctx, float* params, const float* grads, float* velocity, int64_t n, const float* lr,
                float momentum, bool nesterov);

}  // namespace ember::cuda
