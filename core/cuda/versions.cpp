// Versions of the CUDA libraries, compiled against and loaded (the #1 source of GPU trouble).
// None of these queries needs a GPU or a driver.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#ifdef EMBER_WITH_NCCL
#include <nccl.h>
#endif

#include "../runtime.h"

namespace ember {

namespace {
std::string cuda_version(int v) { return v ? std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10) : ""; }
std::string dotted(int major, int minor, int patch) {
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}
}  // namespace

std::vector<LibraryVersion> probed_versions() {
  std::vector<LibraryVersion> out;
  int driver = 0, runtime = 0;
  if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
  if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
  (void)cudaGetLastError();
  out.push_back({"CUDA driver", "", driver ? cuda_version(driver) : "none"});
  out.push_back({"CUDA runtime", cuda_version(CUDART_VERSION), cuda_version(runtime)});

  int major = 0, minor = 0, patch = 0;
  std::string cublas_loaded;
  if (cublasGetProperty(MAJOR_VERSION, &major) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(MINOR_VERSION, &minor) == CUBLAS_STATUS_SUCCESS &&
      cublasGetProperty(PATCH_LEVEL, &patch) == CUBLAS_STATUS_SUCCESS)
    cublas_loaded = dotted(major, minor, patch);
  out.push_back({"cuBLAS", dotted(CUBLAS_VER_MAJOR, CUBLAS_VER_MINOR, CUBLAS_VER_PATCH), cublas_loaded});

  const size_t cudnn = cudnnGetVersion();  // e.g. 91900 for 9.19.0
  out.push_back(
      {"cuDNN", dotted(CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL),
       dotted(static_cast<int>(cudnn / 10000), static_cast<int>(cudnn % 10000 / 100), static_cast<int>(cudnn % 100))});
#ifdef EMBER_WITH_NCCL
  int nccl = 0;
  std::string nccl_loaded;
  if (ncclGetVersion(&nccl) == ncclSuccess) nccl_loaded = dotted(nccl / 10000, nccl % 10000 / 100, nccl % 100);
  out.push_back({"NCCL", dotted(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), nccl_loaded});
#endif
  return out;
}

}  // namespace ember
