// Attention kernels and launchers. Row-major products map onto cuBLAS' column-major ones as
// C^T = op(B)^T op(A)^T; each sample's heads form one strided batch (head h's queries start h Dk
// columns after head 0's), so a product is one call per sample. Four phases, so that attention
// dropout (the Dropout kernels on the probabilities) runs between them.
#include <cmath>

#include "../../core/cuda/check.h"
#include "attention.h"

namespace ember::cuda {

namespace {
using ::ember::detail::AttentionShape;
constexpr int kThreads = 128;

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>((n + kThreads - 1) / kThreads, 4096)));
}

__global__ void softmax_rows(float* __restrict__ p, int64_t rows, int64_t t, bool causal) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x)
    ::ember::detail::attention_softmax_row(p + r * t, t, causal ? r % t + 1 : t);
}

__global__ void softmax_backward_rows(const float* __restrict__ p, float* __restrict__ dp, int64_t rows, int64_t t,
                                      float scale) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows; r += int64_t(gridDim.x) * blockDim.x)
    ::ember::detail::attention_softmax_backward_row(p + r * t, dp + r * t, t, scale);
}

// Row-major C (m x n) = alpha op(A) op(B) + beta C for `batch` matrices at the given strides.
void gemm(Context& ctx, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
          int64_t sa, const float* b, int64_t ldb, int64_t sb, float* c, int64_t ldc, int64_t sc, int64_t batch) {
  const float beta = 0.0f;
  EMBER_CUBLAS_CHECK(cublasSgemmStridedBatched(
      ctx.blas(), tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
      static_cast<int>(m), static_cast<int>(k), &alpha, b, static_cast<int>(ldb), sb, a, static_cast<int>(lda), sa,
      &beta, c, static_cast<int>(ldc), sc, static_cast<int>(batch)));
}

void check(const Context& ctx, const Tensor& t, const Shape& want, const char* what) {
  const Device d = Device::cuda(ctx.device());
  EMBER_CHECK(t.shape() == want && t.dtype() == DType::F32 && t.device() == d && t.layout() == Layout::RowMajor,
              ShapeError,
              std::string("attention (cuda): ") + what + " must be f32 row-major " + want.str() + " on " + d.str() +
                  ", got " + t.str());
}

const float* in(const Tensor& t) { return static_cast<const float*>(t.raw()); }
float* out(Tensor& t) { return static_cast<float*>(t.raw()); }
}  // namespace

void attention_scores(Context& ctx, const AttentionShape& g, const Tensor& qkv, Tensor& probs) {
  check(ctx, qkv, Shape{g.n * g.t, g.width()}, "qkv");
  check(ctx, probs, Shape{g.n * g.heads, g.t, g.t}, "the probabilities");
  const int64_t t = g.t, dk = g.key_dim, w = g.width(), h = g.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  for (int64_t n = 0; n < g.n; ++n) {
    const float* q = in(qkv) + n * t * w;
    gemm(ctx, false, true, t, t, dk, scale, q, w, dk, q + h * dk, w, dk, out(probs) + n * h * t * t, t, t * t, h);
  }
  softmax_rows<<<blocks_for(g.n * h * t), kThreads, 0, ctx.stream()>>>(out(probs), g.n * h * t, t, g.causal);
  EMBER_CUDA_CHECK(cudaGetLastError());
}

void attention_values(Context& ctx, const AttentionShape& g, const Tensor& probs, const Tensor& qkv, Tensor& o) {
  check(ctx, qkv, Shape{g.n * g.t, g.width()}, "qkv");
  check(ctx, probs, Shape{g.n * g.heads, g.t, g.t}, "the probabilities");
  check(ctx, o, Shape{g.n * g.t, g.heads * g.value_dim}, "the output");
  const int64_t t = g.t, dk = g.key_dim, dv = g.value_dim, w = g.width(), hdv = g.heads * dv, h = g.heads;
  for (int64_t n = 0; n < g.n; ++n)
    gemm(ctx, false, false, t, dv, t, 1.0f, in(probs) + n * h * t * t, t, t * t, in(qkv) + n * t * w + 2 * h * dk, w,
         dv, out(o) + n * t * hdv, hdv, dv, h);
}

void attention_backward_values(Context& ctx, const AttentionShape& g, const Tensor& qkv, const Tensor& probs,
                               const Tensor& dout, Tensor& dqkv, Tensor& dprobs) {
  check(ctx, qkv, Shape{g.n * g.t, g.width()}, "qkv");
  check(ctx, probs, Shape{g.n * g.heads, g.t, g.t}, "the probabilities");
  check(ctx, dout, Shape{g.n * g.t, g.heads * g.value_dim}, "the output gradient");
  check(ctx, dqkv, qkv.shape(), "dqkv");
  ensure(dprobs, probs.shape(), DType::F32, probs.device());
  const int64_t t = g.t, dk = g.key_dim, dv = g.value_dim, w = g.width(), hdv = g.heads * dv, h = g.heads;
  for (int64_t n = 0; n < g.n; ++n) {
    const float* base = in(qkv) + n * t * w;
    const float* p = in(probs) + n * h * t * t;
    const float* go = in(dout) + n * t * hdv;
    float* d = out(dqkv) + n * t * w;
    float* dp = out(dprobs) + n * h * t * t;
    gemm(ctx, true, false, t, dv, t, 1.0f, p, t, t * t, go, hdv, dv, d + 2 * h * dk, w, dv, h);      // dV = P^T dO
    gemm(ctx, false, true, t, t, dv, 1.0f, go, hdv, dv, base + 2 * h * dk, w, dv, dp, t, t * t, h);  // dP = dO V^T
  }
}

void attention_backward_scores(Context& ctx, const AttentionShape& g, const Tensor& qkv, const Tensor& probs,
                               Tensor& dprobs, Tensor& dqkv) {
  check(ctx, qkv, Shape{g.n * g.t, g.width()}, "qkv");
  check(ctx, probs, Shape{g.n * g.heads, g.t, g.t}, "the probabilities");
  check(ctx, dprobs, probs.shape(), "the probabilities' gradient");
  check(ctx, dqkv, qkv.shape(), "dqkv");
  const int64_t t = g.t, dk = g.key_dim, w = g.width(), h = g.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  softmax_backward_rows<<<blocks_for(g.n * h * t), kThreads, 0, ctx.stream()>>>(in(probs), out(dprobs), g.n * h * t, t,
                                                                                scale);
  EMBER_CUDA_CHECK(cudaGetLastError());
  for (int64_t n = 0; n < g.n; ++n) {
    const float* base = in(qkv) + n * t * w;
    const float* ds = in(dprobs) + n * h * t * t;
    float* d = out(dqkv) + n * t * w;
    gemm(ctx, false, false, t, dk, t, 1.0f, ds, t, t * t, base + h * dk, w, dk, d, w, dk, h);  // dQ = dS K
    gemm(ctx, true, false, t, dk, t, 1.0f, ds, t, t * t, base, w, dk, d + h * dk, w, dk, h);   // dK = dS^T Q
  }
}

}  // namespace ember::cuda
