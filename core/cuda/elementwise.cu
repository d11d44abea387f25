// Element-wise kernels (see elementwise.h): grid-stride loops.
#include "check.h"
#include "elementwise.h"

namespace ember::cuda {

namespace {
template <typename T>
__global__ void fill_kernel(T* __restrict__ p, int64_t n, T value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = value;
}

__global__ void scale_kernel(float* __restrict__ p, int64_t n, float factor) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] *= factor;
}

// One thread per element, indexed by the destination (coalesced writes).
template <typename T>
__global__ void permute_kernel(const T* __restrict__ src, T* __restrict__ dst, int64_t n, int64_t c, int64_t hw,
                               bool to_nhwc) {
  const int64_t total = n * c * hw;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    if (to_nhwc) {  // e = (b, p, ch) in NHWC; the source is (b, ch, p)
      const int64_t ch = e % c, rest = e / c, p = rest % hw, b = rest / hw;
      dst[e] = src[(b * c + ch) * hw + p];
    } else {  // e = (b, ch, p) in NCHW; the source is (b, p, ch)
      const int64_t p = e % hw, rest = e / hw, ch = rest % c, b = rest / c;
      dst[e] = src[(b * hw + p) * c + ch];
    }
  }
}

unsigned blocks(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + 255) / 256, 2048)));
}
}  // namespace

void fill(Context& ctx, float* p, int64_t n, float value) {
  if (n <= 0) return;
  fill_kernel<<<blocks(n), 256, 0, ctx.stream()>>>(p, n, value);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void fill(Context& ctx, double* p, int64_t n, double value) {
  if (n <= 0) return;
  fill_kernel<<<blocks(n), 256, 0, ctx.stream()>>>(p, n, value);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void permute_nchw(Context& ctx, const void* src, void* dst, int64_t n, int64_t c, int64_t h, int64_t w, int bytes,
                  bool to_nhwc) {
  const int64_t total = n * c * h * w;
  if (total <= 0) return;
  const unsigned b = static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((total + 255) / 256, 4096)));
  switch (bytes) {
    case 1:
      permute_kernel<<<b, 256, 0, ctx.stream()>>>(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), n, c,
                                                  h * w, to_nhwc);
      break;
    case 4:
      permute_kernel<<<b, 256, 0, ctx.stream()>>>(static_cast<const uint32_t*>(src), static_cast<uint32_t*>(dst), n, c,
                                                  h * w, to_nhwc);
      break;
    case 8:
      permute_kernel<<<b, 256, 0, ctx.stream()>>>(static_cast<const uint64_t*>(src), static_cast<uint64_t*>(dst), n, c,
                                                  h * w, to_nhwc);
      break;
    default:
      throw ArgumentError("permute_nchw: elements of " + std::to_string(bytes) + " bytes");
  }
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void scale(Context& ctx, float* p, int64_t n, float factor) {
  if (n <= 0) return;
  scale_kernel<<<blocks(n), 256, 0, ctx.stream()>>>(p, n, factor);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
