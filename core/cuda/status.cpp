// cuda_status() for a build with the CUDA backend: driver, runtime, devices, and whether this
// build has code for them. Every failure becomes a reason in words, never a crash.
#include <cuda_runtime.h>

#include "../cuda_arch.h"
#include "../runtime.h"
#include "check.h"

namespace ember {
const CudaStatus& probed_status();
}

namespace ember::cuda {

namespace detail {
std::string with_device(const std::string& why) {
  int dev = -1;
  if (cudaGetDevice(&dev) == cudaSuccess && dev >= 0 && probed_status().usable)
    return why + " on cuda:" + std::to_string(dev);
  (void)cudaGetLastError();
  return why;
}

std::string cublas_status_name(cublasStatus_t s) {
  // cublasGetStatusName/String exist since cuBLAS 11.4: the library's own words.
  return std::string(cublasGetStatusName(s)) + ": " + cublasGetStatusString(s);
}
}  // namespace detail
}  // namespace ember::cuda

namespace ember {

namespace {
std::string describe(cudaError_t err) { return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err); }

CudaStatus probe() {
  CudaStatus s;
  s.built = true;
  cudaRuntimeGetVersion(&s.runtime_version);
  if (cudaDriverGetVersion(&s.driver_version) != cudaSuccess || s.driver_version == 0) {
    s.reason = "no CUDA driver is installed (libcuda could not be loaded)";
    (void)cudaGetLastError();
    return s;
  }
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err == cudaErrorInsufficientDriver) {
    s.reason = "the CUDA driver (" + std::to_string(s.driver_version / 1000) + "." +
               std::to_string(s.driver_version % 1000 / 10) + ") is older than the CUDA runtime (" +
               std::to_string(s.runtime_version / 1000) + "." + std::to_string(s.runtime_version % 1000 / 10) +
               ") this build needs, or no driver is loaded";
    (void)cudaGetLastError();
    return s;
  }
  if (err == cudaErrorNoDevice || (err == cudaSuccess && count == 0)) {
    s.reason = "the CUDA driver sees no GPU";
    (void)cudaGetLastError();
    return s;
  }
  if (err != cudaSuccess) {
    s.reason = "CUDA could not list devices (" + describe(err) + ")";
    (void)cudaGetLastError();
    return s;
  }
  // Properties and attributes only: no context is created on any GPU here (cudaSetDevice or a
  // kernel query would put one, hundreds of MB, on every visible GPU of every process, and fail
  // on an exclusive-process GPU another process holds). Whether this build has code for a GPU is
  // decided from its architecture list; the first use of a GPU confirms it (cuda::Context).
  std::string unsupported;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    if (const cudaError_t e = cudaGetDeviceProperties(&prop, i); e != cudaSuccess) {
      unsupported += std::string(unsupported.empty() ? "" : "; ") + "cuda:" + std::to_string(i) +
                     ": its properties could not be read (" + describe(e) + ")";
      (void)cudaGetLastError();
      continue;
    }
    int mode = cudaComputeModeDefault;  // an attribute query: no context either
    if (cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, i) != cudaSuccess) (void)cudaGetLastError();
    if (mode == cudaComputeModeProhibited) {
      unsupported += std::string(unsupported.empty() ? "" : "; ") + "cuda:" + std::to_string(i) + " (" + prop.name +
                     ") is in compute-prohibited mode (no process may use it)";
      continue;
    }
    if (::ember::detail::arch_coverage(EMBER_CUDA_ARCHS, prop.major, prop.minor) == ::ember::detail::ArchCoverage::No) {
      unsupported += std::string(unsupported.empty() ? "" : "; ") + "cuda:" + std::to_string(i) + " (" + prop.name +
                     ", sm_" + std::to_string(prop.major) + std::to_string(prop.minor) +
                     ") has no code in this build (built for " + EMBER_CUDA_ARCHS +
                     "); rebuild with -DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(prop.major) +
                     std::to_string(prop.minor);
      continue;
    }
    GpuInfo g;
    g.index = i;
    g.name = prop.name;
    g.cc_major = prop.major;
    g.cc_minor = prop.minor;
    g.total_memory = prop.totalGlobalMem;
    g.multiprocessors = prop.multiProcessorCount;
    s.gpus.push_back(g);
  }
  s.device_count = static_cast<int>(s.gpus.size());
  s.usable = s.device_count > 0;
  if (!s.usable) s.reason = unsupported.empty() ? "no usable GPU" : unsupported;
  return s;
}
}  // namespace

const CudaStatus& probed_status() {
  static const CudaStatus status = probe();
  return status;
}

}  // namespace ember
