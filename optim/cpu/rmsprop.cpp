// RMSprop's fused loop (see rmsprop.h).
#include "rmsprop.h"

#include <cmath>

namespace ember::cpu {

void rmsprop_update(float* params, const float* grads, float* v, int64_t n, float lr, float rho, float epsilon) {
  const float one_rho = 1.0f - rho;
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float gi = grads[i];
    const float vi = rho * v[i] + one_rho * gi * gi;
    v[i] = vi;
    params[i] -= lr * gi / std::sqrt(vi + epsilon);
  }
}

}  // namespace ember::cpu
