// SGD with momentum (see sgd.h).
#include "sgd.h"

namespace ember::cpu {

void sgd_update(float* p, const float* g, float* vel, int64_t n, float lr, float mu, bool nesterov) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float vi = mu * vel[i] - lr * g[i];
    vel[i] = vi;
    p[i] += nesterov ? mu * vi - lr * g[i] : vi;
  }
}

}  // namespace ember::cpu
