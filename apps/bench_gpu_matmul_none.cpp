// bench_matmul's GPU part in a build without CUDA.
#include "apps/bench_gpu_matmul.h"

namespace ember::bench {

std::optional<GpuMatmulTimes> gpu_matmul(int64_t, int, int, std::string* why) {
  if (why) *why = "this build has no CUDA backend";
  return std::nullopt;
}

}  // namespace ember::bench
