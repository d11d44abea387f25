// Check macros for the CUDA libraries: each throws the library's typed error with the failing
// statement, file:line, function, the current device and the library's own error string.
// Include only from .cpp/.cu files of the CUDA backend: public headers never expose CUDA.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <string>

#include "../error.h"

namespace ember::cuda::detail {
std::string with_device(const std::string& why);  // appends " on cuda:N" when a device is current
std::string cublas_status_name(cublasStatus_t s);
}  // namespace ember::cuda::detail

// The one generic form: `ok` tests the status, `describe` turns it into words.
#define EMBER_LIB_CHECK_(Library, ErrorType, stmt, status_type, ok, describe)                                      \
  do {                                                                                                             \
    const status_type ember_status_ = (stmt);                                                                      \
    if (!(ok)) {                                                                                                   \
      const std::string ember_why_ = ::ember::cuda::detail::with_device(describe);                                 \
      throw ErrorType(::ember::detail::failure_message(Library, #stmt, ember_why_, __FILE__, __LINE__, __func__)); \
    }                                                                                                              \
  } while (0)

#define EMBER_CUDA_CHECK(stmt)                                                                  \
  EMBER_LIB_CHECK_("CUDA", ::ember::CudaError, stmt, cudaError_t, ember_status_ == cudaSuccess, \
                   ((void)cudaGetLastError(), /* clear a non-sticky error */                    \
                    std::string(cudaGetErrorName(ember_status_)) + ": " + cudaGetErrorString(ember_status_)))

#define EMBER_CUDNN_CHECK(stmt)                                                                              \
  EMBER_LIB_CHECK_("cuDNN", ::ember::CudnnError, stmt, cudnnStatus_t, ember_status_ == CUDNN_STATUS_SUCCESS, \
                   std::string(cudnnGetErrorString(ember_status_)))

#define EMBER_CUBLAS_CHECK(stmt)                                                                                 \
  EMBER_LIB_CHECK_("cuBLAS", ::ember::CublasError, stmt, cublasStatus_t, ember_status_ == CUBLAS_STATUS_SUCCESS, \
                   ::ember::cuda::detail::cublas_status_name(ember_status_))
