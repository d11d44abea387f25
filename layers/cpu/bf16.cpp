// fp32 -> bf16 rounding for the mixed_bf16 policy (bf16.h).
#include "bf16.h"

#include <omp.h>

namespace ember::cpu {

namespace {
constexpr int64_t kSplit = 1 << 16;  // elements: below this one thread converts (memory-bound, short)

void convert(const float* src, bf16* dst, int64_t n, const float* mask) {
  if (mask) {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dst[i] = mask[i] > 0.0f ? to_bf16(src[i]) : bf16{0};
  } else {
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) dst[i] = to_bf16(src[i]);
  }
}
}  // namespace

void to_bf16(const float* src, bf16* dst, int64_t n, const float* mask) {
  if (n < kSplit || omp_in_parallel() || omp_get_max_threads() == 1) return convert(src, dst, n, mask);
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
    convert(src + lo, dst + lo, hi - lo, mask ? mask + lo : nullptr);
  }
}

}  // namespace ember::cpu
