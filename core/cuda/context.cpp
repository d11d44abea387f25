// Per-device contexts (see context.h).
#include "context.h"

#include <algorithm>
#include <array>
#include <memory>
#include <mutex>
#include <string>

#include "../cuda_graph.h"
#include "../runtime.h"
#include "check.h"

namespace ember::cuda {

namespace {
// A library handle made by `create` and bound to a stream by `bind`; destroyed again when the
// binding fails, so nothing leaks on that path.
template <typename Handle, typename CreateFn, typename BindFn, typename DestroyFn>
Handle create_bound(CreateFn create, BindFn bind, DestroyFn destroy) {
  Handle h = nullptr;
  create(&h);
  try {
    bind(h);
  } catch (...) {
    destroy(h);
    throw;
  }
  return h;
}
}  // namespace

cudaError_t probe_kernel_image();

namespace {
std::string gpu_name(int device) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) return "cuda:" + std::to_string(device);
  return "cuda:" + std::to_string(device) + " (" + prop.name + ", sm_" + std::to_string(prop.major) +
         std::to_string(prop.minor) + ")";
}

// The first use of a GPU: its primary context is made here (at cudaSetDevice since CUDA 12, at
// the first call that needs it before), so this is where a GPU another process holds, or one
// this build has no code for, shows; each is named for what it is.
void open_device(int device) {
  const auto fail = [device](const char* what, cudaError_t err) {
    if (err == cudaErrorDevicesUnavailable)
      throw DeviceError(gpu_name(device) +
                        " is unavailable: it is in exclusive-process mode and another process holds it (" +
                        cudaGetErrorName(err) + ")");
    if (err == cudaErrorNoKernelImageForDevice || err == cudaErrorInvalidDeviceFunction || err == cudaErrorInvalidPtx ||
        err == cudaErrorUnsupportedPtxVersion) {
      cudaDeviceProp prop{};
      (void)cudaGetDeviceProperties(&prop, device);
      throw DeviceError(gpu_name(device) + " has no code in this build (" + cudaGetErrorName(err) +
                        "); rebuild with -DCMAKE_CUDA_ARCHITECTURES=" + std::to_string(prop.major) +
                        std::to_string(prop.minor));
    }
    throw DeviceError(gpu_name(device) + " could not be " + what + ": " + cudaGetErrorName(err) + ": " +
                      cudaGetErrorString(err));
  };
  if (const cudaError_t set = cudaSetDevice(device); set != cudaSuccess) fail("opened", set);
  const cudaError_t image = probe_kernel_image();
  (void)cudaGetLastError();
  if (image != cudaSuccess) fail("used", image);
}
}  // namespace

Context::Context(int device) : device_(device) {
  open_device(device);
  EMBER_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

cublasHandle_t Context::blas() {
  std::lock_guard lock(mu_);
  if (!blas_) {
    EMBER_CUDA_CHECK(cudaSetDevice(device_));
    // cuBLAS's recommended workspace (32 MiB on Hopper and newer, 4 MiB before), from the
    // caching allocator: counted under the memory cap, and nothing for cuBLAS to allocate
    // while a graph is captured.
    int major = 0;
    EMBER_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device_));
    const int64_t bytes = int64_t{major >= 9 ? 32 : 4} << 20;
    Tensor workspace = Tensor::empty(Shape{bytes}, DType::U8, Device::cuda(device_));
    blas_ = create_bound<cublasHandle_t>(
        [](cublasHandle_t* h) { EMBER_CUBLAS_CHECK(cublasCreate(h)); },
        [&](cublasHandle_t h) {
          EMBER_CUBLAS_CHECK(cublasSetStream(h, stream_));
          EMBER_CUBLAS_CHECK(cublasSetWorkspace(h, workspace.raw(), static_cast<size_t>(bytes)));
        },
        cublasDestroy);
    blas_workspace_ = std::move(workspace);
    blas_tf32_ = !allow_tf32();  // forces the math mode to be set below
  }
  // Float32 results match the CPU path: no TF32 unless allowed (core/runtime.h). Checked on
  // every use, so the setting may change between runs of one process.
  if (const bool tf32 = allow_tf32(); tf32 != blas_tf32_) {
    EMBER_CUBLAS_CHECK(cublasSetMathMode(blas_, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
    blas_tf32_ = tf32;
  }
  return blas_;
}

cublasLtHandle_t Context::blas_lt() {
  std::lock_guard lock(mu_);
  if (!blas_lt_) {
    EMBER_CUDA_CHECK(cudaSetDevice(device_));
    EMBER_CUBLAS_CHECK(cublasLtCreate(&blas_lt_));
  }
  return blas_lt_;
}

Context::BlasWorkspace Context::blas_workspace() {
  (void)blas();  // makes the workspace with the handle
  std::lock_guard lock(mu_);
  return {blas_workspace_.raw(), blas_workspace_.nbytes()};
}

cudnnHandle_t Context::dnn() {
  std::lock_guard lock(mu_);
  if (!dnn_) {
    EMBER_CUDA_CHECK(cudaSetDevice(device_));
    dnn_ = create_bound<cudnnHandle_t>([](cudnnHandle_t* h) { EMBER_CUDNN_CHECK(cudnnCreate(h)); },
                                       [&](cudnnHandle_t h) { EMBER_CUDNN_CHECK(cudnnSetStream(h, stream_)); },
                                       cudnnDestroy);
  }
  return dnn_;
}

Context::Workspace Context::workspace(size_t bytes) {
  Workspace w;
  if (bytes == 0) return w;
  std::lock_guard lock(mu_);
  if (workspace_.defined() && workspace_.nbytes() >= bytes) {
    w.ptr = workspace_.raw();
    return w;
  }
  const auto block = [&](size_t n) {
    return Tensor::empty(Shape{static_cast<int64_t>((n + 255) / 256 * 256)}, DType::U8, Device::cuda(device_));
  };
  // Inside a CUDA graph capture a block of the call's own would be held for the graph after the
  // call (never reused in it: one per call of the step), so the kept buffer grows instead.
  if (!CudaGraph::capturing(Device::cuda(device_)) &&
      bytes > std::min(kKeptWorkspace, allocator_headroom(device_) / 4)) {
    w.transient = block(bytes);  // too large to keep: the caching allocator's for this call
    w.ptr = w.transient.raw();
    return w;
  }
  workspace_ = Tensor();  // the old block first: under a memory cap both may not fit
  workspace_ = block(bytes);
  w.ptr = workspace_.raw();
  return w;
}

Context::~Context() {
  if (dnn_) cudnnDestroy(dnn_);
  if (blas_) cublasDestroy(blas_);
  if (blas_lt_) cublasLtDestroy(blas_lt_);
  if (stream_) cudaStreamDestroy(stream_);
}

void Context::synchronize() const {
  host_syncs_.fetch_add(1, std::memory_order_relaxed);
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

Context& context(int device) {
  // Made once per device under a lock, then found by one atomic load: an op's call takes no lock.
  // Never destroyed (ops may run while the process exits).
  static std::mutex mu;
  static std::array<std::atomic<Context*>, 64> contexts{};
  EMBER_CHECK(device >= 0 && device < 64, DeviceError, "no cuda:" + std::to_string(device));
  auto& slot = contexts[static_cast<size_t>(device)];
  Context* ctx = slot.load(std::memory_order_acquire);
  if (!ctx) {
    std::lock_guard lock(mu);
    ctx = slot.load(std::memory_order_relaxed);
    if (!ctx) {
      ctx = new Context(device);  // a throw leaves the slot empty: the next call tries again
      slot.store(ctx, std::memory_order_release);
    }
  }
  // Every op reaches its stream and handles through here: the device is made current first, or
  // a launch on another device's stream fails (the thread's device may be any: a copy's guard,
  // NCCL, the user's code). cudaGetDevice is a thread-local read; the set happens on a change.
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess || current != device) EMBER_CUDA_CHECK(cudaSetDevice(device));
  return *ctx;
}

Context& context_of(const Tensor& t) {
  EMBER_CHECK(t.device().is_cuda(), DeviceError, "a CUDA op got a tensor on " + t.device().str());
  return context(t.device().index);
}

bool is_nchw(const Context& ctx, const Tensor& t, const Shape& shape, Layout layout) {
  return t.shape() == shape && t.layout() == layout && t.dtype() == DType::F32 &&
         t.device() == Device::cuda(ctx.device());
}

void check_nchw(const Context& ctx, const Tensor& t, const Shape& shape, const std::string& op, const char* what,
                Layout layout) {
  EMBER_CHECK(is_nchw(ctx, t, shape, layout), ShapeError,
              op + ": " + what + " must be an f32 " + (layout == Layout::NHWC ? "NHWC" : "NCHW") + " tensor of shape " +
                  shape.str() + " on cuda:" + std::to_string(ctx.device()) + ", got " + t.str());
}

}  // namespace ember::cuda
