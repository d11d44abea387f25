// Batch gather from a device-resident uint8 dataset (see gather.h).
#include "../../core/cuda/check.h"
#include "gather.h"

namespace ember::cuda {

namespace {
// One thread per output element; consecutive threads read consecutive bytes of one image.
__global__ void gather_kernel(const uint8_t* __restrict__ images, const int32_t* __restrict__ labels,
                              const int32_t* __restrict__ order, int64_t m, int64_t shard_offset, int64_t count,
                              int64_t per, float* __restrict__ x, int32_t* __restrict__ y) {
  const int64_t first = order[m] + shard_offset;  // the cursor
  const int64_t total = count * per;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = e / per, j = e - b * per;
    if (first + b >= m) continue;  // the host checked; never read past the order
    const int64_t idx = order[first + b];
    x[e] = static_cast<float>(images[idx * per + j]) * (1.0f / 255.0f);  // as Dataset::gather
    if (j == 0) y[b] = labels[idx];
  }
}

__global__ void advance_kernel(int32_t* cursor, int32_t by) { *cursor += by; }
}  // namespace

void gather_batch(Context& ctx, const Tensor& images, const Tensor& labels, const Tensor& order, int64_t shard_offset,
                  int64_t count, int64_t advance, Tensor& x, Tensor& y) {
  const Device d = Device::cuda(ctx.device());
  EMBER_CHECK(images.dtype() == DType::U8 && images.rank() >= 2 && images.device() == d, ShapeError,
              "gather (cuda): images must be u8 (N, ...) on " + d.str() + ", got " + images.str());
  const int64_t n = images.dim(0), per = images.numel() / std::max<int64_t>(n, 1);
  EMBER_CHECK(labels.dtype() == DType::I32 && labels.shape() == Shape{n} && labels.device() == d, ShapeError,
              "gather (cuda): labels must be i32 (" + std::to_string(n) + ",) on " + d.str() + ", got " + labels.str());
  EMBER_CHECK(order.dtype() == DType::I32 && order.rank() == 1 && order.numel() >= 1 && order.device() == d &&
                  shard_offset >= 0 && count >= 0 && shard_offset + count <= order.numel() - 1 && advance >= 0 &&
                  advance <= order.numel(),
              ShapeError,
              "gather (cuda): rows +" + std::to_string(shard_offset) + ".." + std::to_string(shard_offset + count) +
                  " (advancing " + std::to_string(advance) + ") of the order and cursor " + order.str() + " on " +
                  d.str());
  EMBER_CHECK(x.dtype() == DType::F32 && x.layout() == Layout::RowMajor && x.device() == d &&
                  x.shape() == images.shape().without_batch().with_batch(count),
              ShapeError,
              "gather (cuda): x must be f32 " + images.shape().without_batch().with_batch(count).str() + " on " +
                  d.str() + ", got " + x.str());
  EMBER_CHECK(y.dtype() == DType::I32 && y.shape() == Shape{count} && y.device() == d, ShapeError,
              "gather (cuda): y must be i32 (" + std::to_string(count) + ",) on " + d.str() + ", got " + y.str());
  const int64_t m = order.numel() - 1;
  auto* o = static_cast<int32_t*>(const_cast<void*>(order.raw()));
  if (count > 0) {
    const int64_t total = count * per;
    const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 4096));
    gather_kernel<<<blocks, 256, 0, ctx.stream()>>>(
        static_cast<const uint8_t*>(images.raw()), static_cast<const int32_t*>(labels.raw()), o, m, shard_offset, count,
        per, static_cast<float*>(x.raw()), static_cast<int32_t*>(y.raw()));
    EMBER_CUDA_CHECK(cudaGetLastError());
  }
  if (advance > 0) {
    advance_kernel<<<1, 1, 0, ctx.stream()>>>(o + m, static_cast<int32_t>(advance));
    EMBER_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace ember::cuda
