// Embedding kernels: the forward a thread per output element (a bad id writes zeros and raises a
// flag the host reads back); the backward sorts (id, position) pairs with CUB's stable radix sort,
// so each id's positions stay ascending, marks where each id's run starts and ends, and a thread
// per (id, feature) sums its run in the batch's sum order (layers/embedding_math.h: the CPU's tree,
// without recursion).
#include <cub/device/device_radix_sort.cuh>

#include "../../core/cuda/check.h"
#include "../embedding_math.h"
#include "embedding.h"

namespace ember::cuda {

namespace {
constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 4096)));
}

__global__ void gather_rows(const int32_t* __restrict__ ids, const float* __restrict__ table, float* __restrict__ y,
                            int32_t* __restrict__ bad, int64_t r, int64_t v, int64_t c) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < r * c; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = e / c;
    const int32_t id = ids[p];
    if (id < 0 || id >= v) {
      y[e] = 0.0f;
      if (bad) *bad = 1;  // every writer writes the same value
    } else {
      y[e] = table[int64_t{id} * c + e % c];
    }
  }
}

__global__ void iota(int32_t* __restrict__ pos, int64_t r) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < r; p += int64_t(gridDim.x) * blockDim.x)
    pos[p] = static_cast<int32_t>(p);
}

// run[v] = where id v's positions start in the sorted list, run[V + v] = where they end (both 0
// when v is absent: the buffer is zeroed first).
__global__ void mark_runs(const int32_t* __restrict__ sorted_ids, int64_t r, int64_t v, int32_t* __restrict__ run) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < r; i += int64_t(gridDim.x) * blockDim.x) {
    const int32_t id = sorted_ids[i];
    if (i == 0 || sorted_ids[i - 1] != id) run[id] = static_cast<int32_t>(i);
    if (i == r - 1 || sorted_ids[i + 1] != id) run[v + id] = static_cast<int32_t>(i + 1);
  }
}

__global__ void table_grad(const int32_t* __restrict__ pos, const int32_t* __restrict__ run,
                           const float* __restrict__ dy, float* __restrict__ dtable, int64_t v, int64_t c,
                           int64_t groups) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < v * c; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t id = e / c, col = e % c;
    const int32_t first = run[id];
    dtable[e] = ::ember::detail::embedding_grad_counter(pos + first, run[v + id] - first, dy, c, col, groups);
  }
}

int bits_for(int64_t v) {  // the key bits the radix sort needs for ids in [0, v)
  int b = 1;
  while (b < 31 && (int64_t{1} << b) < v) ++b;
  return b;
}

void check(const Context& ctx, const Tensor& ids, const Tensor& table, const Tensor& y, const char* what) {
  const Device d = Device::cuda(ctx.device());
  EMBER_CHECK(ids.dtype() == DType::I32 && ids.device() == d && ids.layout() == Layout::RowMajor, ShapeError,
              "embedding (cuda): ids must be i32 row-major on " + d.str() + ", got " + ids.str());
  EMBER_CHECK(table.rank() == 2 && table.dtype() == DType::F32 && table.device() == d, ShapeError,
              "embedding (cuda): the table must be f32 (vocabulary, features) on " + d.str() + ", got " + table.str());
  std::vector<int64_t> want(ids.shape().begin(), ids.shape().end());
  want.push_back(table.dim(1));
  EMBER_CHECK(
      y.shape() == Shape(want) && y.dtype() == DType::F32 && y.device() == d && y.layout() == Layout::RowMajor,
      ShapeError,
      std::string("embedding (cuda): ") + what + " must be f32 row-major " + Shape(want).str() + ", got " + y.str());
}
}  // namespace

void embedding_forward(Context& ctx, const Tensor& ids, const Tensor& table, Tensor& y, bool check_ids) {
  check(ctx, ids, table, y, "the output");
  const int64_t r = ids.numel(), v = table.dim(0), c = table.dim(1);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  EMBER_CUDA_CHECK(cudaStreamIsCapturing(ctx.stream(), &capture));
  const bool wait = check_ids && capture == cudaStreamCaptureStatusNone;
  Tensor flag;
  if (wait) flag = Tensor::zeros(Shape{1}, DType::I32, ids.device());
  gather_rows<<<blocks_for(r * c), kThreads, 0, ctx.stream()>>>(
      static_cast<const int32_t*>(ids.raw()), static_cast<const float*>(table.raw()), static_cast<float*>(y.raw()),
      wait ? static_cast<int32_t*>(flag.raw()) : nullptr, r, v, c);
  EMBER_CUDA_CHECK(cudaGetLastError());
  if (!wait) return;
  int32_t bad = 0;
  EMBER_CUDA_CHECK(cudaMemcpyAsync(&bad, flag.raw(), sizeof(bad), cudaMemcpyDeviceToHost, ctx.stream()));
  ctx.synchronize();
  EMBER_CHECK(
      bad == 0, ArgumentError,
      "Embedding: an id is outside the vocabulary [0, " + std::to_string(v) + ") (on " + ids.device().str() + ")");
}

void embedding_backward(Context& ctx, const Tensor& ids, const Tensor& dy, Tensor& dtable, Tensor& scratch) {
  check(ctx, ids, dtable, dy, "the output gradient");
  const int64_t r = ids.numel(), v = dtable.dim(0), c = dtable.dim(1);
  EMBER_CHECK(r < (int64_t{1} << 31), ShapeError, "embedding (cuda): more than 2^31 positions");
  size_t sort_bytes = 0;
  EMBER_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const int32_t*>(nullptr),
                                                   static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                   static_cast<int32_t*>(nullptr), static_cast<int>(r), 0, bits_for(v),
                                                   ctx.stream()));
  // scratch (i32): sorted ids (r), positions (r), sorted positions (r), runs (2v), CUB's temp.
  const int64_t temp_words = static_cast<int64_t>((sort_bytes + 3) / 4);
  ensure(scratch, Shape{3 * r + 2 * v + temp_words}, DType::I32, ids.device());
  auto* sorted_ids = static_cast<int32_t*>(scratch.raw());
  int32_t* pos = sorted_ids + r;
  int32_t* sorted_pos = pos + r;
  int32_t* run = sorted_pos + r;
  void* temp = run + 2 * v;
  iota<<<blocks_for(r), kThreads, 0, ctx.stream()>>>(pos, r);
  EMBER_CUDA_CHECK(cudaGetLastError());
  EMBER_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, sort_bytes, static_cast<const int32_t*>(ids.raw()), sorted_ids,
                                                   pos, sorted_pos, static_cast<int>(r), 0, bits_for(v), ctx.stream()));
  EMBER_CUDA_CHECK(cudaMemsetAsync(run, 0, static_cast<size_t>(2 * v) * sizeof(int32_t), ctx.stream()));
  mark_runs<<<blocks_for(r), kThreads, 0, ctx.stream()>>>(sorted_ids, r, v, run);
  EMBER_CUDA_CHECK(cudaGetLastError());
  table_grad<<<blocks_for(v * c), kThreads, 0, ctx.stream()>>>(sorted_pos, run, static_cast<const float*>(dy.raw()),
                                                               static_cast<float*>(dtable.raw()), v, c,
                                                               ::ember::batch_groups(r));
  EMBER_CUDA_CHECK(cudaGetLastError());
}

}  // namespace ember::cuda
