// Typed errors. Every failure inside Ember throws an ember::Error (or a subclass); the library
// never calls exit(). Apps catch at main, print one line and exit non-zero.
// Each backend library has one check macro that records the failing statement, file:line,
// function and the library's own error string (CUDA ones live in core/cuda/check.h).
#pragma once

#include <stdexcept>
#include <string>

namespace ember {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ShapeError : public Error {  // tensor shapes or layouts do not fit an op
 public:
  using Error::Error;
};
class ArgumentError : public Error {  // a bad argument or configuration value
 public:
  using Error::Error;
};
class IoError : public Error {  // a file is missing, unreadable, truncated or malformed
 public:
  using Error::Error;
};
class NumericalError : public Error {  // training diverged: a non-finite loss
 public:
  using Error::Error;
};

class DeviceError : public Error {  // a requested device is missing or unusable
 public:
  using Error::Error;
};
class OutOfMemoryError : public Error {  // an allocation exceeded the memory available or allowed
 public:
  using Error::Error;
};
class BackendError : public Error {  // a backend library (oneDNN, CUDA, ...) reported a failure
 public:
  using Error::Error;
};
class CudaError : public BackendError {
 public:
  using BackendError::BackendError;
};
class CudnnError : public BackendError {
 public:
  using BackendError::BackendError;
};
class CublasError : public BackendError {
 public:
  using BackendError::BackendError;
};
class NcclError : public BackendError {
 public:
  using BackendError::BackendError;
};
class MpiError : public BackendError {
 public:
  using BackendError::BackendError;
};
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

// EMBER_CHECK(cond, ExceptionType, message...): argument and shape validation. The message is
// variadic only so that braces with commas in it need no extra parentheses.
#define EMBER_CHECK(cond, Type, ...)                   \
  do {                                                 \
    if (!(cond)) throw Type(std::string(__VA_ARGS__)); \
  } while (0)
