// Softmax cross-entropy kernels: one thread per row (K is small: 10 for MNIST), then a
// single-block reduction of the row losses in double, like the CPU path's double sum.
#include "core/cuda/check.h"
#include "layers/cuda/softmax_xent.h"

namespace ember::cuda {

namespace {
constexpr int kThreads = 256;

__global__ void xent_rows(const float* __restrict__ z, const int32_t* __restrict__ y, float* __restrict__ probs,
                          double* __restrict__ row_loss, int* __restrict__ bad_label, int64_t n, int64_t k) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float* zi = z + i * k;
  float* pi = probs + i * k;
  const int32_t label = y[i];
  if (label < 0 || label >= k) {
    atomicMax(bad_label, 1);
    row_loss[i] = 0.0;
    return;
  }
  float m = zi[0];
  for (int64_t j = 1; j < k; ++j) m = fmaxf(m, zi[j]);
  double sum = 0.0;
  for (int64_t j = 0; j < k; ++j) {
    pi[j] = expf(zi[j] - m);
    sum += pi[j];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t j = 0; j < k; ++j) pi[j] *= inv;
  row_loss[i] = log(sum) - static_cast<double>(zi[label] - m);
}

__global__ void reduce_mean(const double* __restrict__ row_loss, int64_t n, double* __restrict__ out) {
  __shared__ double partial[kThreads];
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += row_loss[i];
  partial[threadIdx.x] = s;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) partial[threadIdx.x] += partial[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) *out = partial[0] / static_cast<double>(n);
}

__global__ void xent_backward(const float* __restrict__ p, const int32_t* __restrict__ y, float* __restrict__ d,
                              int64_t n, int64_t k) {
  const float scale = 1.0f / static_cast<float>(n);
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n * k; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = e / k, j = e % k;
    d[e] = p[e] * scale - (j == y[i] ? scale : 0.0f);
  }
}

__global__ void correct_rows(const float* __restrict__ z, const int32_t* __restrict__ y, int64_t n, int64_t k,
                             unsigned long long* __restrict__ correct) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  int64_t best = 0;
  for (int64_t j = 1; j < k; ++j)
    if (z[i * k + j] > z[i * k + best]) best = j;  // first maximum wins, as on the CPU
  if (best == y[i]) atomicAdd(correct, 1ull);
}

void check(const Tensor& logits, const Tensor& labels, const Context& ctx) {
  const Device d = Device::cuda(ctx.device());
  EMBER_CHECK(logits.rank() == 2 && logits.dtype() == DType::F32 && logits.device() == d &&
                  logits.layout() == Layout::RowMajor,
              ShapeError, "softmax cross-entropy (cuda): logits must be f32 (N, K) on " + d.str() + ", got " + logits.str());
  EMBER_CHECK(labels.shape() == Shape{logits.dim(0)} && labels.dtype() == DType::I32 && labels.device() == d, ShapeError,
              "softmax cross-entropy (cuda): labels must be i32 (" + std::to_string(logits.dim(0)) + ",) on " +
                  d.str() + ", got " + labels.str());
}

unsigned blocks(int64_t n) { return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 4096))); }
}  // namespace

float softmax_xent_forward(Context& ctx, const Tensor& logits, const Tensor& labels, Tensor& probs) {
  check(logits, labels, ctx);
  EMBER_CHECK(probs.shape() == logits.shape() && probs.device() == logits.device(), ShapeError,
              "softmax cross-entropy (cuda): probs must match logits");
  const int64_t n = logits.dim(0), k = logits.dim(1);
  // Scratch through the caching allocator: reused from the second step on.
  Tensor scratch = Tensor::empty(Shape{(n + 2) * 2 + 2}, DType::F32, logits.device());  // n + 1 doubles, 1 int
  auto* row_loss = static_cast<double*>(scratch.raw());
  double* mean = row_loss + n;
  int* bad = reinterpret_cast<int*>(mean + 1);
  EMBER_CUDA_CHECK(cudaMemsetAsync(bad, 0, sizeof(int), ctx.stream()));
  xent_rows<<<blocks(n), kThreads, 0, ctx.stream()>>>(static_cast<const float*>(logits.raw()),
                                                      static_cast<const int32_t*>(labels.raw()),
                                                      static_cast<float*>(probs.raw()), row_loss, bad, n, k);
  EMBER_CUDA_CHECK(cudaGetLastError());
  reduce_mean<<<1, kThreads, 0, ctx.stream()>>>(row_loss, n, mean);
  EMBER_CUDA_CHECK(cudaGetLastError());
  double host_mean = 0;
  int host_bad = 0;
  EMBER_CUDA_CHECK(cudaMemcpyAsync(&host_mean, mean, sizeof(double), cudaMemcpyDeviceToHost, ctx.stream()));
  EMBER_CUDA_CHECK(cudaMemcpyAsync(&host_bad, bad, sizeof(int), cudaMemcpyDeviceToHost, ctx.stream()));
  ctx.synchronize();
  EMBER_CHECK(host_bad == 0, ArgumentError,
              "softmax cross-entropy (cuda): a label is outside [0, " + std::to_string(k) + ")");
  return static_cast<float>(host_mean);
}

void softmax_xent_backward(Context& ctx, const Tensor& probs, const Tensor& labels, Tensor& dlogits) {
  check(probs, labels, ctx);
  EMBER_CHECK(dlogits.shape() == probs.shape() && dlogits.device() == probs.device(), ShapeError,
              "softmax cross-entropy (cuda): dlogits must match probs");
  const int64_t n = probs.dim(0), k = probs.dim(1);
  xent_backward<<<blocks(n * k), kThreads, 0, ctx.stream()>>>(static_cast<const float*>(probs.raw()),
                                                              static_cast<const int32_t*>(labels.raw()),
                                                              static_cast<float*>(dlogits.raw()), n, k);
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
