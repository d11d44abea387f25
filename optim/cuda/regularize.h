// Gradient clipping and decoupled weight decay on the GPU: the contracts of optim/cpu/regularize.h,
// queued on the device's stream with no host wait (the clip factor never leaves the device).
#pragma once

#include <cstdint>

#include "../../core/cuda/context.h"

namespace ember::cuda {

// Doubles of scratch clip_by_global_norm needs.
inline constexpr int64_t kNormScratch = 257;

void clip_by_value(Context& ctx, float* g, int64_t n, float c);
// g *= min(1, c / ||g||), the norm summed in double in a fixed order (256 block partials, then one
// block), into `scratch` (kNormScratch doubles on the device).
void clip_by_global_norm(Context& ctx, float* g, int64_t n, float c, double* scratch);
// p -= (*lr * weight_decay) * mask * p, the learning rate read on the device (f32).
void decay(Context& ctx, float* p, const float* mask, int64_t n, const float* lr, float weight_decay);

}  // namespace ember::cuda
