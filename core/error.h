/// @file
/// Typed errors. Every failure inside Ember throws an ember::Error (or a subclass); the library
/// never calls exit(). Apps catch at main, print one line and exit non-zero.
/// Each backend library has one check macro that records the failing statement, file:line,
/// function and the library's own error string (CUDA ones live in core/cuda/check.h).
#pragma once

#include <stdexcept>
#include <string>

/// Ember's public API: tensors and devices, data, layers and models, losses and metrics,
/// optimizers and distribution strategies.
namespace ember {

/// The base of every exception Ember throws (a std::runtime_error: what() is the message).
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Tensor shapes or layouts do not fit an op.
class ShapeError : public Error {
 public:
  using Error::Error;
};
/// A bad argument or configuration value.
class ArgumentError : public Error {
 public:
  using Error::Error;
};
/// A file is missing, unreadable, truncated or malformed.
class IoError : public Error {
 public:
  using Error::Error;
};
/// Training diverged: a non-finite loss.
class NumericalError : public Error {
 public:
  using Error::Error;
};

/// A requested device is missing or unusable.
class DeviceError : public Error {
 public:
  using Error::Error;
};
/// An allocation exceeded the memory available or allowed.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};
/// A backend library (oneDNN, CUDA, ...) reported a failure.
class BackendError : public Error {
 public:
  using Error::Error;
};
/// A CUDA call (runtime or driver) reported a failure.
class CudaError : public BackendError {
 public:
  using BackendError::BackendError;
};
/// cuDNN reported a failure.
class CudnnError : public BackendError {
 public:
  using BackendError::BackendError;
};
/// cuBLAS (or cuBLASLt) reported a failure.
class CublasError : public BackendError {
 public:
  using BackendError::BackendError;
};
/// NCCL reported a failure.
class NcclError : public BackendError {
 public:
  using BackendError::BackendError;
};
/// MPI reported a failure.
class MpiError : public BackendError {
 public:
  using BackendError::BackendError;
};
/// oneDNN reported a failure.
class DnnlError : public BackendError {
 public:
  using BackendError::BackendError;
};

namespace detail {
// "<what> failed: <why> (at file:line in function)"
std::string failure_message(const char* library, const char* statement, const std::string& why, const char* file,
                            int line, const char* function);
}  // namespace detail

}  // namespace ember

/// EMBER_CHECK(cond, ExceptionType, message...): argument and shape validation: throws
/// `Type(std::string(message...))` when `cond` is false. The message is variadic only so that
/// braces with commas in it need no extra parentheses.
#define EMBER_CHECK(cond, Type, ...)                   \
  do {                                                 \
    if (!(cond)) throw Type(std::string(__VA_ARGS__)); \
  } while (0)
