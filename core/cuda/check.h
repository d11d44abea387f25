// Check macros for the CUDA libraries: each throws the library's typed error with the failing
// statement, file:line, function, the current device and the library's own error string.
// Include only from .cpp/.cu files of the CUDA backend: public headers never expose CUDA.
#pragma once

#include <cuda_runtime.h>

#include "core/error.h"

namespace ember::cuda::detail {
std::string with_device(const std::string& why);  // appends " on cuda:N" when a device is current
}

#define EMBER_CUDA_CHECK(stmt)                                                                          \
  do {                                                                                                  \
    const cudaError_t ember_err_ = (stmt);                                                              \
    if (ember_err_ != cudaSuccess) {                                                                    \
      (void)cudaGetLastError(); /* clear the sticky-free error state */                                 \
      throw ::ember::CudaError(::ember::detail::failure_message(                                       \
          "CUDA", #stmt,                                                                                \
          ::ember::cuda::detail::with_device(std::string(cudaGetErrorName(ember_err_)) + ": " +        \
                                             cudaGetErrorString(ember_err_)),                          \
          __FILE__, __LINE__, __func__));                                                               \
    }                                                                                                   \
  } while (0)
