// Batch gather from a device-resident dataset (see gather.h).
#include "../../core/cuda/check.h"
#include "../../core/cuda/last_block.cuh"
#include "../../core/runtime.h"
#include "gather.h"

namespace ember::cuda {

namespace {
// With fused_advance(), the last kernel of a gather advances the cursor itself (no one-thread
// launch), by the last-block ticket (core/cuda/last_block.cuh).
__device__ unsigned advance_ticket;

// A feature as the batch holds it: u8 and f32 values scaled into f32 (as Dataset::gather), i32 ids
// as they are.
__device__ inline float batch_value(uint8_t v, float scale) { return static_cast<float>(v) * scale; }
__device__ inline float batch_value(float v, float scale) { return v * scale; }
__device__ inline int32_t batch_value(int32_t v, float) { return v; }

// One thread per output element; consecutive threads read consecutive elements of one sample.
// Targets are 32-bit words (i32 labels or f32 values): copied as they are. The cursor (order[m])
// comes in as its own pointer, not through `order`: `order` stays __restrict__ because the rows
// read, all below m, never alias the cursor. advance != 0: this launch moves the cursor on by it.
template <typename T, typename X>
__global__ void gather_kernel(const T* __restrict__ features, const uint32_t* __restrict__ targets,
                              const int32_t* __restrict__ order, int32_t* cursor, int64_t m, int64_t shard_offset,
                              int64_t count, int64_t per, int64_t tper, float scale, X* __restrict__ x,
                              uint32_t* __restrict__ y, int32_t advance) {
  const int32_t c = *cursor;  // read by every thread before its block's ticket
  const int64_t first = c + shard_offset;
  const int64_t total = count * per;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = e / per, j = e - b * per;
    if (first + b >= m) continue;  // the host checked; never read past the order
    const int64_t idx = order[first + b];
    x[e] = batch_value(features[idx * per + j], scale);
    if (j < tper) y[b * tper + j] = targets[idx * tper + j];
  }
  if (advance != 0 && last_block_to_read(advance_ticket)) *cursor = c + advance;  // advance_kernel's int32 sum
}

// Targets wider than the features (rare: an autoencoder's are as wide): a thread per target word.
__global__ void gather_targets(const uint32_t* __restrict__ targets, const int32_t* __restrict__ order, int32_t* cursor,
                               int64_t m, int64_t shard_offset, int64_t count, int64_t tper, int64_t from,
                               uint32_t* __restrict__ y, int32_t advance) {
  const int32_t c = *cursor;
  const int64_t first = c + shard_offset;
  const int64_t width = tper - from;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < count * width;
       e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t b = e / width, j = from + (e - b * width);
    if (first + b >= m) continue;
    y[b * tper + j] = targets[order[first + b] * tper + j];
  }
  if (advance != 0 && last_block_to_read(advance_ticket)) *cursor = c + advance;
}

__global__ void advance_kernel(int32_t* cursor, int32_t by) { *cursor += by; }

unsigned blocks(int64_t total) { return static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 4096)); }
}  // namespace

void gather_batch(Context& ctx, const Tensor& features, const Tensor& targets, float scale, const Tensor& order,
                  int64_t shard_offset, int64_t count, int64_t advance, Tensor& x, Tensor& y) {
  const Device d = Device::cuda(ctx.device());
  // Undefined features: the targets alone (a model's further outputs); undefined targets: the
  // features alone (its further inputs).
  const bool with_features = features.defined(), with_targets = targets.defined();
  EMBER_CHECK(with_features || with_targets, ArgumentError, "gather (cuda): neither features nor targets");
  const bool ids = with_features && features.dtype() == DType::I32;
  EMBER_CHECK(!with_features || ((features.dtype() == DType::U8 || features.dtype() == DType::F32 || ids) &&
                                 features.rank() >= 2 && features.device() == d),
              ShapeError,
              "gather (cuda): features must be u8, f32 or i32 (N, ...) on " + d.str() + ", got " + features.str());
  EMBER_CHECK(!ids || scale == 1.0f, ArgumentError,
              "gather (cuda): i32 ids are copied as they are: the scale must be 1, got " + std::to_string(scale));
  const DType x_dtype = ids ? DType::I32 : DType::F32;
  const int64_t n = with_features ? features.dim(0) : targets.dim(0);
  const int64_t per = with_features ? features.numel() / std::max<int64_t>(n, 1) : 0;
  EMBER_CHECK(!with_targets || ((targets.dtype() == DType::I32 || targets.dtype() == DType::F32) &&
                                targets.rank() >= 1 && targets.dim(0) == n && targets.device() == d),
              ShapeError,
              "gather (cuda): targets must be i32 or f32 (" + std::to_string(n) + ", ...) on " + d.str() + ", got " +
                  targets.str());
  const int64_t tper = with_targets ? targets.numel() / std::max<int64_t>(n, 1) : 0;
  EMBER_CHECK(order.dtype() == DType::I32 && order.rank() == 1 && order.numel() >= 1 && order.device() == d &&
                  shard_offset >= 0 && count >= 0 && shard_offset + count <= order.numel() - 1 && advance >= 0 &&
                  advance <= order.numel(),
              ShapeError,
              "gather (cuda): rows +" + std::to_string(shard_offset) + ".." + std::to_string(shard_offset + count) +
                  " (advancing " + std::to_string(advance) + ") of the order and cursor " + order.str() + " on " +
                  d.str());
  EMBER_CHECK(!with_features || (x.dtype() == x_dtype && x.layout() == Layout::RowMajor && x.device() == d &&
                                 x.shape() == features.shape().without_batch().with_batch(count)),
              ShapeError,
              "gather (cuda): x must be " + std::string(dtype_name(x_dtype)) + " " +
                  features.shape().without_batch().with_batch(count).str() + " on " + d.str() + ", got " + x.str());
  EMBER_CHECK(!with_targets || (y.dtype() == targets.dtype() &&
                                y.shape() == targets.shape().without_batch().with_batch(count) && y.device() == d),
              ShapeError,
              "gather (cuda): y must be " + std::string(dtype_name(targets.dtype())) + " " +
                  targets.shape().without_batch().with_batch(count).str() + " on " + d.str() + ", got " + y.str());
  const int64_t m = order.numel() - 1;
  auto* o = static_cast<int32_t*>(const_cast<void*>(order.raw()));
  int32_t* cursor = o + m;
  const auto* t = with_targets ? static_cast<const uint32_t*>(targets.raw()) : nullptr;
  auto* yw = with_targets ? static_cast<uint32_t*>(y.raw()) : nullptr;
  const bool feature_kernel = count > 0 && with_features;
  const bool target_kernel = count > 0 && tper > per;  // the target words past the features' (all without features)
  // With fused_advance(), the last kernel launched advances the cursor (the target kernel reads it
  // after the feature kernel, so only the later of the two may move it); with no kernel to launch,
  // or the switch off, the one-thread kernel does.
  const bool fold = ::ember::fused_advance() && advance > 0 && (feature_kernel || target_kernel);
  const int32_t by = static_cast<int32_t>(advance);
  if (feature_kernel) {
    const int64_t total = count * per;
    const int32_t here = fold && !target_kernel ? by : 0;
    if (ids)
      gather_kernel<<<blocks(total), 256, 0, ctx.stream()>>>(static_cast<const int32_t*>(features.raw()), t, o, cursor,
                                                             m, shard_offset, count, per, tper, scale,
                                                             static_cast<int32_t*>(x.raw()), yw, here);
    else if (features.dtype() == DType::U8)
      gather_kernel<<<blocks(total), 256, 0, ctx.stream()>>>(static_cast<const uint8_t*>(features.raw()), t, o, cursor,
                                                             m, shard_offset, count, per, tper, scale,
                                                             static_cast<float*>(x.raw()), yw, here);
    else
      gather_kernel<<<blocks(total), 256, 0, ctx.stream()>>>(static_cast<const float*>(features.raw()), t, o, cursor, m,
                                                             shard_offset, count, per, tper, scale,
                                                             static_cast<float*>(x.raw()), yw, here);
    EMBER_CUDA_CHECK(cudaGetLastError());
  }
  if (target_kernel) {
    gather_targets<<<blocks(count * (tper - per)), 256, 0, ctx.stream()>>>(t, o, cursor, m, shard_offset, count, tper,
                                                                           per, yw, fold ? by : 0);
    EMBER_CUDA_CHECK(cudaGetLastError());
  }
  if (advance > 0 && !fold) {
    advance_kernel<<<1, 1, 0, ctx.stream()>>>(cursor, by);
    EMBER_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace ember::cuda
