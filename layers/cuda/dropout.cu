// Dropout kernels: grid-stride loops over memory order; each thread derives the step's key from
// the device-side counter once, then hashes each element's row-major NCHW index with exactly the
// functions of layers/random_bits.h (EMBER_HOST_DEVICE), so the CPU and GPU masks agree.
#include <limits>

#include "../../core/cuda/check.h"
#include "../../core/cuda/last_block.cuh"
#include "dropout.h"

namespace ember::cuda {

namespace {
using ::ember::detail::DropoutParams;

// With fused_advance(), the forward's last block advances the counter itself (no one-thread
// launch), by the last-block ticket (core/cuda/last_block.cuh).
__device__ unsigned advance_ticket;

// No __restrict__ on x/y: the layers may call the forward in place (y == x). None on the counter
// either: with `advance`, the last block writes it (dropout_advance_kernel's arithmetic).
// Row-major: the memory index is the logical one.
__global__ void dropout_rowmajor_kernel(const float* x, float* y, uint8_t* __restrict__ mask, float* counter,
                                        DropoutParams p, int64_t n, bool advance) {
  const uint64_t key = ::ember::detail::step_key(p.seed, ::ember::detail::counter_value(counter));
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const bool keep = ::ember::detail::element_bits24(key, static_cast<uint64_t>(i)) >= p.threshold;
    mask[i] = keep ? 1 : 0;
    y[i] = keep ? x[i] * p.scale : 0.0f;
  }
  if (advance && last_block_to_read(advance_ticket)) ::ember::detail::counter_advance(counter);
}

// NHWC: memory index ((b H + h) W + w) C + c hashes as its NCHW index (b C + c) H W + h W + w.
// Index is uint32_t when every index fits (the usual case: 32-bit division is far cheaper than
// 64-bit), else uint64_t.
template <typename Index>
__global__ void dropout_nhwc_kernel(const float* x, float* y, uint8_t* __restrict__ mask, float* counter,
                                    DropoutParams p, Index n, Index c, Index hw, bool advance) {
  const uint64_t key = ::ember::detail::step_key(p.seed, ::ember::detail::counter_value(counter));
  for (Index i = blockIdx.x * Index(blockDim.x) + threadIdx.x; i < n; i += Index(gridDim.x) * blockDim.x) {
    const Index pixel = i / c, ch = i - pixel * c;  // pixel = b HW + (h W + w)
    const Index b = pixel / hw, spatial = pixel - b * hw;
    const uint64_t logical = (uint64_t(b) * c + ch) * hw + spatial;
    const bool keep = ::ember::detail::element_bits24(key, logical) >= p.threshold;
    mask[i] = keep ? 1 : 0;
    y[i] = keep ? x[i] * p.scale : 0.0f;
  }
  if (advance && last_block_to_read(advance_ticket)) ::ember::detail::counter_advance(counter);
}

__global__ void dropout_advance_kernel(float* counter) { ::ember::detail::counter_advance(counter); }

// No __restrict__ on dy/dx: in place (dx == dy) allowed.
__global__ void dropout_backward_kernel(const uint8_t* __restrict__ mask, const float* dy, float* dx, float scale,
                                        int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dx[i] = mask[i] ? dy[i] * scale : 0.0f;
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096)); }

void check_counter(const Context& ctx, const Tensor& counter) {
  EMBER_CHECK(counter.numel() == 2 && counter.dtype() == DType::F32 && counter.device() == Device::cuda(ctx.device()),
              ShapeError,
              "dropout (cuda): the step counter must be 2 f32 values on cuda:" + std::to_string(ctx.device()) +
                  ", got " + counter.str());
}

void check_like(const Tensor& t, const Tensor& ref, DType dt, const char* what) {
  EMBER_CHECK(t.shape() == ref.shape() && t.layout() == ref.layout() && t.dtype() == dt && t.device() == ref.device(),
              ShapeError,
              std::string("dropout (cuda): ") + what + " must be " + dtype_name(dt) + " like " + ref.str() + ", got " +
                  t.str());
}

// Both forwards: `advance` folds dropout_advance into the kernel (the counter is written only then).
void launch_forward(Context& ctx, const DropoutParams& p, const Tensor& counter, const Tensor& x, Tensor& y,
                    Tensor& mask, bool advance) {
  check_counter(ctx, counter);
  EMBER_CHECK(
      x.dtype() == DType::F32 && x.device() == Device::cuda(ctx.device()) &&
          (x.layout() == Layout::RowMajor || x.rank() == 4),
      ShapeError,
      "dropout (cuda): input must be an f32 tensor on cuda:" + std::to_string(ctx.device()) + ", got " + x.str());
  check_like(y, x, DType::F32, "output");
  check_like(mask, x, DType::U8, "mask");
  const int64_t n = x.numel();
  if (n == 0) return;
  const auto* in = static_cast<const float*>(x.raw());
  auto* out = static_cast<float*>(y.raw());
  auto* keep = static_cast<uint8_t*>(mask.raw());
  auto* c = static_cast<float*>(counter.raw());  // written only with `advance` (the caller's Tensor& then)
  if (x.layout() == Layout::RowMajor) {
    dropout_rowmajor_kernel<<<blocks_for(n), 256, 0, ctx.stream()>>>(in, out, keep, c, p, n, advance);
  } else {
    const int64_t channels = x.dim(1), hw = x.dim(2) * x.dim(3);
    // Room for the grid-stride loop's last step past n (at most one grid of 4096 x 256).
    if (n + int64_t(4096) * 256 <= std::numeric_limits<uint32_t>::max())
      dropout_nhwc_kernel<uint32_t><<<blocks_for(n), 256, 0, ctx.stream()>>>(
          in, out, keep, c, p, static_cast<uint32_t>(n), static_cast<uint32_t>(channels), static_cast<uint32_t>(hw),
          advance);
    else
      dropout_nhwc_kernel<uint64_t><<<blocks_for(n), 256, 0, ctx.stream()>>>(
          in, out, keep, c, p, static_cast<uint64_t>(n), static_cast<uint64_t>(channels), static_cast<uint64_t>(hw),
          advance);
  }
  EMBER_CUDA_CHECK(cudaGetLastError());
}
}  // namespace

void dropout_forward(Context& ctx, const DropoutParams& p, const Tensor& counter, const Tensor& x, Tensor& y,
                     Tensor& mask) {
  launch_forward(ctx, p, counter, x, y, mask, false);
}

void dropout_forward(Context& ctx, const DropoutParams& p, Tensor& counter, const Tensor& x, Tensor& y, Tensor& mask,
                     bool advance) {
  if (advance && x.numel() == 0) {
    // No forward kernel to fold the advance into: the checks (an empty x launches nothing), then
    // the one-thread advance.
    launch_forward(ctx, p, counter, x, y, mask, false);
    dropout_advance(ctx, counter);
    return;
  }
  launch_forward(ctx, p, counter, x, y, mask, advance);
}

void dropout_advance(Context& ctx, Tensor& counter) {
  check_counter(ctx, counter);
  dropout_advance_kernel<<<1, 1, 0, ctx.stream()>>>(static_cast<float*>(counter.raw()));
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void dropout_backward(Context& ctx, float scale, const Tensor& mask, const Tensor& dy, Tensor& dx) {
  EMBER_CHECK(dy.dtype() == DType::F32 && dy.device() == Device::cuda(ctx.device()), ShapeError,
              "dropout (cuda): output gradient must be an f32 tensor on cuda:" + std::to_string(ctx.device()) +
                  ", got " + dy.str());
  check_like(mask, dy, DType::U8, "mask");
  check_like(dx, dy, DType::F32, "input gradient");
  const int64_t n = dy.numel();
  if (n == 0) return;
  dropout_backward_kernel<<<blocks_for(n), 256, 0, ctx.stream()>>>(static_cast<const uint8_t*>(mask.raw()),
                                                                   static_cast<const float*>(dy.raw()),
                                                                   static_cast<float*>(dx.raw()), scale, n);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
