// The fused Adam kernel: the same update as ember::cpu::adam_update (optim/adam.h), one pass
// over p, g, m, v on the device's stream.
#pragma once

#include <cstdint>

#include "../../core/cuda/context.h"

namespace ember::cuda {

void adam_update(Context& ctx, float* params, const float* grads, float* m, float* v, int64_t n, float lr_t,
                 float beta1, float beta2, float epsilon);

}  // namespace ember::cuda
