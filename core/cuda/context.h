// Per-device CUDA context: the stream every op of that device runs on, and the cuBLAS and
// cuDNN handles bound to it. RAII, created lazily on first use, one per device, never copied.
// Part of the CUDA module (libember_cuda); never included by public headers.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

#include "../tensor.h"

namespace ember::cuda {

class Context {
 public:
  explicit Context(int device);
  ~Context();  // destroys handles and the stream; never throws
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // Created on first use, so that copies (which need only the stream) work even where cuBLAS
  // or cuDNN cannot start, and report that failure only to the ops that need them.
  cublasHandle_t blas();
  cudnnHandle_t dnn();
  // cuBLASLt (Dense's epilogue-fused GEMMs, set_fused_dense): its own handle (cuBLASLt takes the
  // stream and the workspace per call, and its math is fixed per descriptor, so the cuBLAS
  // handle's math mode does not apply), and the cuBLAS workspace, shared: both libraries queue
  // on this one stream, so their calls never overlap. Make both outside a CUDA graph capture.
  cublasLtHandle_t blas_lt();
  struct BlasWorkspace {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  BlasWorkspace blas_workspace();
  // A device buffer of at least `bytes` for the library calls queued on this stream (cuDNN's
  // convolution workspaces): a buffer kept per device, grown to the largest request up to
  // kKeptWorkspace bytes (and a quarter of what a memory cap still allows), so a call in the
  // steady state allocates nothing and the footprint is the largest workspace, not the sum; a
  // larger request gets a block of its own from the caching allocator (`transient`, which the
  // caller keeps until the call is queued), except inside a CUDA graph capture, where the kept
  // buffer grows (a block of its own would be held for the graph, one per call). One host thread per device at a time,
  // as the context's cuDNN handle already requires: the pointer is used after the call returns, and a buffer it grows
  // away from returns to the caching allocator in stream order (held while a CUDA graph may use it).
  static constexpr size_t kKeptWorkspace = size_t{64} << 20;
  struct Workspace {
    void* ptr = nullptr;
    Tensor transient;
  };
  Workspace workspace(size_t bytes);
  // Blocks the host until the stream's work is done (and reports an asynchronous error);
  // counted in host_syncs().
  void synchronize() const;
  // How many times the host has waited for this device (synchronize(), copies with the host).
  int64_t host_syncs() const { return host_syncs_.load(std::memory_order_relaxed); }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  std::mutex mu_;
  cublasHandle_t blas_ = nullptr;
  bool blas_tf32_ = false;  // the math mode blas_ is set to
  Tensor blas_workspace_;   // cuBLAS's workspace, ours: it allocates nothing during a capture
  Tensor workspace_;        // workspace()'s buffer
  cudnnHandle_t dnn_ = nullptr;
  cublasLtHandle_t blas_lt_ = nullptr;
  mutable std::atomic<int64_t> host_syncs_{0};
};

// The context of `device`, created on first use (thread-safe), with `device` made current on the
// calling thread: every op gets its stream and handles here, so each runs on its own GPU.
Context& context(int device);
// The context of a CUDA tensor's device (DeviceError for a tensor elsewhere).
Context& context_of(const Tensor& t);

// Bytes the device's caching allocator may still hand out under its memory cap (its cached
// blocks can be given back to fit); SIZE_MAX without a cap (memory.cpp).
size_t allocator_headroom(int device);

// Whether `t` is an f32 tensor of `shape` in `layout` (row-major = NCHW by default) on the
// context's device.
bool is_nchw(const Context& ctx, const Tensor& t, const Shape& shape, Layout layout = Layout::RowMajor);
// Checks that `t` is an f32 tensor of `shape` in `layout` on the context's device; the
// ShapeError names the op, the argument and what was given: "<op>: <what> must be ...".
void check_nchw(const Context& ctx, const Tensor& t, const Shape& shape, const std::string& op, const char* what,
                Layout layout = Layout::RowMajor);

}  // namespace ember::cuda
