// The batch's sum order (see pairwise_sum.h).
#include "pairwise_sum.h"

#include <omp.h>

namespace ember {

void pairwise_reduce(float* parts, int64_t n, int64_t count, int64_t stride) {
  if (n <= 1 || count <= 0) return;
  // Below this many adds one thread is faster than waking the others.
  constexpr int64_t kParallelAdds = 1 << 15;
  const bool parallel = !omp_in_parallel() && count * (n - 1) >= kParallelAdds;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t e0 = 0; e0 < count; e0 += 1024)
    pairwise_reduce_range(parts, n, stride, e0, e0 + 1024 < count ? e0 + 1024 : count);
}

}  // namespace ember
