// Gradient clipping and decoupled weight decay on the CPU (optim/optimizer.h, Regularization):
// the twins of optim/cuda/regularize.h.
#pragma once

#include <cstdint>

namespace ember::cpu {

// g = clamp(g, -c, c) (a NaN stays NaN).
void clip_by_value(float* g, int64_t n, float c);
// sqrt(sum g^2), summed in double in a fixed order.
double global_norm(const float* g, int64_t n);
// g *= s.
void scale(float* g, int64_t n, float s);
// p -= factor * p where mask is 1 (mask null: everywhere); factor = learning rate * decay.
void decay(float* p, const float* mask, int64_t n, float factor);

}  // namespace ember::cpu
