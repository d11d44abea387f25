// bench_matmul's GPU part: square SGEMM with cuBLAS, timed three ways (see the header).
// Not yet run on a GPU (scripts/gpu_check.sh runs it there); every call is checked.
#include "apps/bench_gpu_matmul.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "core/cuda/check.h"
#include "core/rng.h"
#include "core/runtime.h"

namespace ember::bench {

namespace {
struct DeviceBuffer {  // move-only owner of one cudaMalloc'ed block
  float* p = nullptr;
  explicit DeviceBuffer(size_t n) { EMBER_CUDA_CHECK(cudaMalloc(&p, n * sizeof(float))); }
  ~DeviceBuffer() { cudaFree(p); }  // frees never throw
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};
struct CublasHandle {
  cublasHandle_t h = nullptr;
  CublasHandle() { EMBER_CUBLAS_CHECK(cublasCreate(&h)); }
  ~CublasHandle() { cublasDestroy(h); }
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
};
}  // namespace

std::optional<GpuMatmulTimes> gpu_matmul(int64_t n, int warmup, int repeats, std::string* why) {
  if (!cuda_available()) {
    if (why) *why = cuda_status().reason;
    return std::nullopt;
  }
  EMBER_CUDA_CHECK(cudaSetDevice(0));
  const size_t count = static_cast<size_t>(n * n);
  std::vector<float> a(count), b(count), c(count);
  Rng rng(1);
  for (size_t i = 0; i < count; ++i) a[i] = rng.uniform(-1, 1), b[i] = rng.uniform(-1, 1);
  DeviceBuffer da(count), db(count), dc(count);
  CublasHandle blas;
  EMBER_CUBLAS_CHECK(cublasSetMathMode(blas.h, CUBLAS_DEFAULT_MATH));  // true FP32: no TF32 in a float benchmark
  const int ni = static_cast<int>(n);
  const float one = 1.0f, zero = 0.0f;
  // Row-major C = A B is column-major C^T = B^T A^T: swap the operands, no transposes.
  auto gemm = [&] {
    EMBER_CUBLAS_CHECK(
        cublasSgemm(blas.h, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &one, db.p, ni, da.p, ni, &zero, dc.p, ni));
  };
  auto sync = [] { EMBER_CUDA_CHECK(cudaDeviceSynchronize()); };
  const size_t bytes = count * sizeof(float);
  EMBER_CUDA_CHECK(cudaMemcpy(da.p, a.data(), bytes, cudaMemcpyHostToDevice));
  EMBER_CUDA_CHECK(cudaMemcpy(db.p, b.data(), bytes, cudaMemcpyHostToDevice));
  GpuMatmulTimes t;
  t.kernel = time_ms(gemm, warmup, repeats, sync);
  t.with_copies = time_ms(
      [&] {
        EMBER_CUDA_CHECK(cudaMemcpy(da.p, a.data(), bytes, cudaMemcpyHostToDevice));
        EMBER_CUDA_CHECK(cudaMemcpy(db.p, b.data(), bytes, cudaMemcpyHostToDevice));
        gemm();
        EMBER_CUDA_CHECK(cudaMemcpy(c.data(), dc.p, bytes, cudaMemcpyDeviceToHost));
      },
      warmup, repeats, sync);
  // Wrong on purpose, to show the tutorials' number: no synchronisation inside the interval.
  t.launch_only = time_ms(gemm, warmup, repeats);
  sync();
  return t;
}

}  // namespace ember::bench
