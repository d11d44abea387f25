// Row softmax kernels: one warp per row, grid-stride over the rows (the grid is capped), each
// lane striding across the row and the warp reducing with shuffles. A warp suits both the small
// rows of a classifier (K = 10: most lanes idle, but no block-wide barrier) and rows of a few
// thousand (each lane ~K/32 values). The exponential sums and the backward's dot product are
// kept in double, as the CPU twin's, so the two agree to float rounding for any K.
#include "../../core/cuda/check.h"
#include "softmax.h"

namespace ember::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr int kRowsPerBlock = kThreads / kWarp;

__device__ float warp_max(float v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__device__ double warp_sum(double v) {
  for (int o = kWarp / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// No __restrict__: the layers may call these in place (y == x, dx == dy). Every lane finishes
// its reads of a row inside the reductions before any lane writes it, and each element is then
// read and written by the same lane.
__global__ void softmax_forward_kernel(const float* x, float* y, int64_t n, int64_t k) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = int64_t(gridDim.x) * kRowsPerBlock;
  for (int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / kWarp; r < n; r += warps) {
    const float* xi = x + r * k;
    float* yi = y + r * k;
    float m = -INFINITY;
    for (int64_t j = lane; j < k; j += kWarp) m = fmaxf(m, xi[j]);
    m = warp_max(m);
    double sum = 0.0;
    for (int64_t j = lane; j < k; j += kWarp) sum += expf(xi[j] - m);
    const float inv = static_cast<float>(1.0 / warp_sum(sum));
    for (int64_t j = lane; j < k; j += kWarp) yi[j] = expf(xi[j] - m) * inv;
  }
}

__global__ void softmax_backward_kernel(const float* y, const float* dy, float* dx, int64_t n, int64_t k) {
  const int lane = threadIdx.x % kWarp;
  const int64_t warps = int64_t(gridDim.x) * kRowsPerBlock;
  for (int64_t r = blockIdx.x * int64_t(kRowsPerBlock) + threadIdx.x / kWarp; r < n; r += warps) {
    const float* yi = y + r * k;
    const float* gi = dy + r * k;
    float* di = dx + r * k;
    double dot = 0.0;
    for (int64_t j = lane; j < k; j += kWarp) dot += static_cast<double>(gi[j]) * yi[j];
    const float s = static_cast<float>(warp_sum(dot));
    for (int64_t j = lane; j < k; j += kWarp) di[j] = yi[j] * (gi[j] - s);
  }
}

unsigned blocks_for_rows(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kRowsPerBlock - 1) / kRowsPerBlock, 4096));
}

void check_rows(const Context& ctx, const Tensor& t, const Shape& s, const char* what) {
  EMBER_CHECK(t.rank() == 2 && t.shape() == s && t.layout() == Layout::RowMajor && t.dtype() == DType::F32 &&
                  t.device() == Device::cuda(ctx.device()),
              ShapeError,
              std::string("softmax (cuda): ") + what + " must be f32 row-major " + s.str() +
                  " on cuda:" + std::to_string(ctx.device()) + ", got " + t.str());
}
}  // namespace

void softmax_forward(Context& ctx, const Tensor& x, Tensor& y) {
  check_rows(ctx, x, x.shape(), "input");
  check_rows(ctx, y, x.shape(), "output");
  const int64_t n = x.dim(0), k = x.dim(1);
  if (n == 0 || k == 0) return;
  softmax_forward_kernel<<<blocks_for_rows(n), kThreads, 0, ctx.stream()>>>(static_cast<const float*>(x.raw()),
                                                                            static_cast<float*>(y.raw()), n, k);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void softmax_backward(Context& ctx, const Tensor& y, const Tensor& dy, Tensor& dx) {
  check_rows(ctx, y, y.shape(), "output");
  check_rows(ctx, dy, y.shape(), "output gradient");
  check_rows(ctx, dx, y.shape(), "input gradient");
  const int64_t n = y.dim(0), k = y.dim(1);
  if (n == 0 || k == 0) return;
  softmax_backward_kernel<<<blocks_for_rows(n), kThreads, 0, ctx.stream()>>>(
      static_cast<const float*>(y.raw()), static_cast<const float*>(dy.raw()), static_cast<float*>(dx.raw()), n, k);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
