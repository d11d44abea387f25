// The fused Adam loop (see adam.h).
#include "adam.h"

#include <cmath>

namespace ember::cpu {

void adam_update(float* p, const float* g, float* m, float* v, int64_t n, float lr_t, float beta1, float beta2,
                 float epsilon) {
  const float one_b1 = 1.0f - beta1, one_b2 = 1.0f - beta2;
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    const float mi = beta1 * m[i] + one_b1 * gi;
    const float vi = beta2 * v[i] + one_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] -= lr_t * mi / (std::sqrt(vi) + epsilon);
  }
}

}  // namespace ember::cpu
