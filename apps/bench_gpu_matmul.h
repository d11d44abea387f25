// cuBLAS timings for bench_matmul (built only with the CUDA backend).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "bench/harness.h"

namespace ember::bench {

struct GpuMatmulTimes {
  Stats kernel;       // cublasSgemm on resident data, synchronised: what the GPU costs
  Stats with_copies;  // host->device copies of A and B, the GEMM, the device->host copy of C
  Stats launch_only;  // the tutorials' mistake: the clock stops when the launch returns
};

// nullopt (and `why`) when no GPU is usable or this build has no CUDA backend.
std::optional<GpuMatmulTimes> gpu_matmul(int64_t n, int warmup, int repeats, std::string* why);

}  // namespace ember::bench
