// Softmax cross-entropy kernels: a thread per row, grid-stride (K is small: 10 for MNIST), then a
// single-block reduction of the row losses in double, like the CPU path's double sum.
#include "../../core/cuda/check.h"
#include "../losses_math.h"
#include "block_sum.cuh"
#include "softmax_xent.h"

namespace ember::cuda {

namespace {
constexpr int kThreads = 256;

// One row: its softmax into pi, its loss (0 for a label outside [0, k), which sets *bad = 1:
// every writer writes the same value, no atomic needed) and whether its argmax is the label.
// The three-kernel path and the fused kernel both call it: the same bits.
__device__ __forceinline__ double xent_row(const float* __restrict__ zi, int32_t label, float* __restrict__ pi,
                                           int64_t k, double* __restrict__ bad, double* ok) {
  int64_t best = 0;
  const double sum = ::ember::detail::softmax_row(zi, pi, k, &best);
  const bool valid = label >= 0 && label < k;
  if (!valid) *bad = 1.0;
  *ok = valid && best == label ? 1.0 : 0.0;
  // __dsub_rn: no contraction with the last operation of log, whichever kernel inlines it.
  return valid ? __dsub_rn(log(sum), static_cast<double>(zi[label] - zi[best])) : 0.0;
}

// d(loss / mean_rows)/dz of one element: p scale - [hit] scale, each operation rounded on its own
// (no FMA contraction, in either kernel that calls it; the CPU path rounds the same way).
__device__ __forceinline__ float xent_grad(float p, float scale, bool hit) {
  return __fsub_rn(__fmul_rn(p, scale), hit ? scale : 0.0f);
}

// Per row: the softmax, the loss and (when row_ok is given) whether the argmax is the label.
__global__ void xent_rows(const float* __restrict__ z, const int32_t* __restrict__ y, float* __restrict__ probs,
                          double* __restrict__ row_loss, double* __restrict__ row_ok, double* __restrict__ bad,
                          int64_t n, int64_t k) {
  // Grid-stride: the grid is capped (blocks()), so one thread may own several rows.
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    double ok = 0.0;
    row_loss[i] = xent_row(z + i * k, y[i], probs + i * k, k, bad, &ok);
    if (row_ok) row_ok[i] = ok;
  }
}

__global__ void reduce_mean(const double* __restrict__ row_loss, int64_t n, double* __restrict__ out) {
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += row_loss[i];
  const double total = block_sum<kThreads>(s);
  if (threadIdx.x == 0) *out = total / static_cast<double>(n);
}

// Adds one block's per-thread sums sa, sb as a fixed tree to acc[0] (divided by the positions per
// sample: exact for one) and acc[1] (thread 0), and counts the batch in acc[3] while acc[0] is
// finite. Every thread of the block calls it.
__device__ __forceinline__ void block_add2(double sa, double sb, double* __restrict__ acc, int64_t positions) {
  __shared__ double pa[kThreads], pb[kThreads];
  pa[threadIdx.x] = sa;
  pb[threadIdx.x] = sb;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) {
      pa[threadIdx.x] += pa[threadIdx.x + stride];
      pb[threadIdx.x] += pb[threadIdx.x + stride];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    acc[0] += pa[0] / static_cast<double>(positions);
    acc[1] += pb[0];
    if (isfinite(acc[0])) acc[3] += 1.0;  // batches before the first non-finite loss (MetricSums)
  }
}

// The accumulating forward's reduction: one block adds the row losses and the row hits, in a
// fixed order (thread t: rows t, t + 256, ...; then the tree), to acc[0] and acc[1].
__global__ void reduce_add2(const double* __restrict__ a, const double* __restrict__ b, int64_t n,
                            double* __restrict__ acc, int64_t positions) {
  double sa = 0.0, sb = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    sa += a[i];
    sb += b[i];
  }
  block_add2(sa, sb, acc, positions);
}

// xent_rows, reduce_add2 and xent_backward in one block (set_fused_loss): thread t takes rows t,
// t + 256, ... in ascending order, as reduce_add2's loop reads them, and adds each row's loss and
// hit as it goes; the same tree follows. So the sums, the probabilities and the gradient are
// the three kernels' bits, with no per-row scratch.
__global__ void xent_fused(const float* __restrict__ z, const int32_t* __restrict__ y, float* __restrict__ probs,
                           float* __restrict__ d, double* __restrict__ acc, int64_t n, int64_t k, int64_t mean_rows,
                           int64_t positions) {
  const float scale = 1.0f / static_cast<float>(mean_rows);
  double sa = 0.0, sb = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const int32_t label = y[i];
    float* pi = probs + i * k;
    double ok = 0.0;
    sa += xent_row(z + i * k, label, pi, k, acc + 2, &ok);
    sb += ok;
    for (int64_t j = 0; j < k; ++j) d[i * k + j] = xent_grad(pi[j], scale, j == label);
  }
  block_add2(sa, sb, acc, positions);
}

__global__ void xent_backward(const float* __restrict__ p, const int32_t* __restrict__ y, float* __restrict__ d,
                              int64_t n, int64_t k, int64_t mean_rows) {
  const float scale = 1.0f / static_cast<float>(mean_rows);
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * k; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / k, j = e % k;
    d[e] = xent_grad(p[e], scale, j == y[i]);
  }
}

__global__ void correct_rows(const float* __restrict__ z, const int32_t* __restrict__ y, int64_t n, int64_t k,
                             unsigned long long* __restrict__ correct) {
  unsigned long long hits = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t best = 0;
    for (int64_t j = 1; j < k; ++j)
      if (z[i * k + j] > z[i * k + best]) best = j;  // first maximum wins, as on the CPU
    if (best == y[i]) ++hits;
  }
  if (hits) atomicAdd(correct, hits);
}

void check(const Tensor& logits, const Tensor& labels, const Context& ctx) {
  const Device d = Device::cuda(ctx.device());
  EMBER_CHECK(
      logits.rank() == 2 && logits.dtype() == DType::F32 && logits.device() == d && logits.layout() == Layout::RowMajor,
      ShapeError, "softmax cross-entropy (cuda): logits must be f32 (N, K) on " + d.str() + ", got " + logits.str());
  EMBER_CHECK(labels.shape() == Shape{logits.dim(0)} && labels.dtype() == DType::I32 && labels.device() == d,
              ShapeError,
              "softmax cross-entropy (cuda): labels must be i32 (" + std::to_string(logits.dim(0)) + ",) on " +
                  d.str() + ", got " + labels.str());
}

unsigned blocks(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 4096)));
}
}  // namespace

float softmax_xent_forward(Context& ctx, const Tensor& logits, const Tensor& labels, Tensor& probs) {
  check(logits, labels, ctx);
  EMBER_CHECK(probs.shape() == logits.shape() && probs.device() == logits.device(), ShapeError,
              "softmax cross-entropy (cuda): probs must match logits");
  const int64_t n = logits.dim(0), k = logits.dim(1);
  // Scratch through the caching allocator: reused from the second step on.
  Tensor scratch = Tensor::empty(Shape{(n + 2) * 2}, DType::F32, logits.device());  // n + 2 doubles
  auto* row_loss = static_cast<double*>(scratch.raw());
  double* mean = row_loss + n;
  double* bad = mean + 1;
  EMBER_CUDA_CHECK(cudaMemsetAsync(bad, 0, sizeof(double), ctx.stream()));
  xent_rows<<<blocks(n), kThreads, 0, ctx.stream()>>>(static_cast<const float*>(logits.raw()),
                                                      static_cast<const int32_t*>(labels.raw()),
                                                      static_cast<float*>(probs.raw()), row_loss, nullptr, bad, n, k);
  EMBER_CUDA_CHECK(cudaGetLastError());
  reduce_mean<<<1, kThreads, 0, ctx.stream()>>>(row_loss, n, mean);
  EMBER_CUDA_CHECK(cudaGetLastError());
  double host_mean = 0;
  double host_bad = 0;
  EMBER_CUDA_CHECK(cudaMemcpyAsync(&host_mean, mean, sizeof(double), cudaMemcpyDeviceToHost, ctx.stream()));
  EMBER_CUDA_CHECK(cudaMemcpyAsync(&host_bad, bad, sizeof(double), cudaMemcpyDeviceToHost, ctx.stream()));
  ctx.synchronize();
  EMBER_CHECK(host_bad == 0.0, ArgumentError,
              "softmax cross-entropy (cuda): a label is outside [0, " + std::to_string(k) + ")");
  return static_cast<float>(host_mean);
}

void softmax_xent_accumulate(Context& ctx, const Tensor& logits, const Tensor& labels, Tensor& probs, Tensor& sums,
                             int64_t positions) {
  check(logits, labels, ctx);
  EMBER_CHECK(probs.shape() == logits.shape() && probs.device() == logits.device(), ShapeError,
              "softmax cross-entropy (cuda): probs must match logits");
  EMBER_CHECK(sums.numel() >= 4 && sums.dtype() == DType::F64 && sums.device() == logits.device(), ShapeError,
              "softmax cross-entropy (cuda): the metric sums must be >= 4 f64 on " + logits.device().str() + ", got " +
                  sums.str());
  const int64_t n = logits.dim(0), k = logits.dim(1);
  if (n == 0) return;
  // Scratch through the caching allocator: the same size every step, so reused (no cudaMalloc).
  Tensor scratch = Tensor::empty(Shape{4 * n}, DType::F32, logits.device());  // 2n doubles
  auto* row_loss = static_cast<double*>(scratch.raw());
  double* row_ok = row_loss + n;
  auto* acc = static_cast<double*>(sums.raw());
  xent_rows<<<blocks(n), kThreads, 0, ctx.stream()>>>(
      static_cast<const float*>(logits.raw()), static_cast<const int32_t*>(labels.raw()),
      static_cast<float*>(probs.raw()), row_loss, row_ok, acc + 2, n, k);
  EMBER_CUDA_CHECK(cudaGetLastError());
  reduce_add2<<<1, kThreads, 0, ctx.stream()>>>(row_loss, row_ok, n, acc, positions);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void softmax_xent_backward(Context& ctx, const Tensor& probs, const Tensor& labels, Tensor& dlogits,
                           int64_t mean_rows) {
  check(probs, labels, ctx);
  EMBER_CHECK(dlogits.shape() == probs.shape() && dlogits.device() == probs.device(), ShapeError,
              "softmax cross-entropy (cuda): dlogits must match probs");
  const int64_t n = probs.dim(0), k = probs.dim(1);
  xent_backward<<<blocks(n * k), kThreads, 0, ctx.stream()>>>(static_cast<const float*>(probs.raw()),
                                                              static_cast<const int32_t*>(labels.raw()),
                                                              static_cast<float*>(dlogits.raw()), n, k, mean_rows);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void softmax_xent_accumulate_backward(Context& ctx, const Tensor& logits, const Tensor& labels, Tensor& probs,
                                      Tensor& sums, Tensor& dlogits, int64_t mean_rows, int64_t positions) {
  check(logits, labels, ctx);
  const int64_t n = logits.dim(0), k = logits.dim(1);
  if (n == 0 || n > kFusedXentRows) {  // nothing to do, or too many rows for one block
    softmax_xent_accumulate(ctx, logits, labels, probs, sums, positions);
    softmax_xent_backward(ctx, probs, labels, dlogits, mean_rows);
    return;
  }
  EMBER_CHECK(probs.shape() == logits.shape() && probs.device() == logits.device(), ShapeError,
              "softmax cross-entropy (cuda): probs must match logits");
  EMBER_CHECK(dlogits.shape() == logits.shape() && dlogits.device() == logits.device(), ShapeError,
              "softmax cross-entropy (cuda): dlogits must match logits");
  EMBER_CHECK(sums.numel() >= 4 && sums.dtype() == DType::F64 && sums.device() == logits.device(), ShapeError,
              "softmax cross-entropy (cuda): the metric sums must be >= 4 f64 on " + logits.device().str() + ", got " +
                  sums.str());
  xent_fused<<<1, kThreads, 0, ctx.stream()>>>(static_cast<const float*>(logits.raw()),
                                               static_cast<const int32_t*>(labels.raw()),
                                               static_cast<float*>(probs.raw()), static_cast<float*>(dlogits.raw()),
                                               static_cast<double*>(sums.raw()), n, k, mean_rows, positions);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

int64_t count_correct(Context& ctx, const Tensor& logits, const Tensor& labels) {
  check(logits, labels, ctx);
  const int64_t n = logits.dim(0), k = logits.dim(1);
  Tensor counter = Tensor::empty(Shape{2}, DType::F32, logits.device());  // 8 bytes: one unsigned long long
  auto* c = static_cast<unsigned long long*>(counter.raw());
  EMBER_CUDA_CHECK(cudaMemsetAsync(c, 0, sizeof(unsigned long long), ctx.stream()));
  correct_rows<<<blocks(n), kThreads, 0, ctx.stream()>>>(static_cast<const float*>(logits.raw()),
                                                         static_cast<const int32_t*>(labels.raw()), n, k, c);
  EMBER_CUDA_CHECK(cudaGetLastError());
  unsigned long long host = 0;
  EMBER_CUDA_CHECK(cudaMemcpyAsync(&host, c, sizeof host, cudaMemcpyDeviceToHost, ctx.stream()));
  ctx.synchronize();
  return static_cast<int64_t>(host);
}

}  // namespace ember::cuda
