// Attention on the CPU: a (sample, head) per iteration across the OpenMP pool, each one's products
// on the shared sgemm (core/cpu/gemm.h; inside the parallel loop each call runs on its thread), the
// softmax rows in place (layers/attention_math.h). A causal row's masked scores are never
// exponentiated: their probabilities are exact zeros, and so are their gradients. Dropout's mask is
// drawn again in the backward from its counter-based bits, never stored.
#include "attention.h"

#include <omp.h>

#include <cmath>

#include "../../core/cpu/gemm.h"
#include "../../core/error.h"
#include "../random_bits.h"

namespace ember::cpu {

namespace {
void check(const Tensor& t, const Shape& want, const char* what) {
  EMBER_CHECK(t.shape() == want && t.dtype() == DType::F32 && t.device().is_cpu() && t.layout() == Layout::RowMajor,
              ShapeError,
              std::string("attention (cpu): ") + what + " must be f32 row-major " + want.str() + ", got " + t.str());
}

void check_all(const AttentionShape& g, const Tensor& qkv, const Tensor& probs) {
  EMBER_CHECK(g.n >= 0 && g.t >= 1 && g.heads >= 1 && g.key_dim >= 1 && g.value_dim >= 1, ShapeError,
              "attention (cpu): bad geometry");
  check(qkv, Shape{g.n * g.t, g.width()}, "qkv");
  check(probs, Shape{g.n * g.heads, g.t, g.t}, "the probabilities");
}

// out[j] = in[j] scale where row element `first + j` is kept, else 0 (in == out allowed).
void drop_row(const AttentionDropout& d, uint64_t first, const float* in, float* out, int64_t t) {
  for (int64_t j = 0; j < t; ++j)
    out[j] = detail::element_bits24(d.key, first + static_cast<uint64_t>(j)) >= d.threshold ? in[j] * d.scale : 0.0f;
}
}  // namespace

void attention_forward(const AttentionShape& g, const Tensor& qkv, Tensor& probs, Tensor& out, Tensor& scratch,
                       const AttentionDropout* dropout) {
  check_all(g, qkv, probs);
  check(out, Shape{g.n * g.t, g.heads * g.value_dim}, "the output");
  const int64_t t = g.t, dk = g.key_dim, dv = g.value_dim, w = g.width(), hdv = g.heads * dv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  // Two blocks per thread, as the backward's with dropout: one buffer for both, sized once.
  if (dropout)
    ensure(scratch, Shape{static_cast<int64_t>(omp_get_max_threads()) * 2 * t * t}, DType::F32, Device::cpu());
  const float* base = qkv.f32();
  float* pb = probs.f32();
  float* ob = out.f32();
  float* sb = dropout ? scratch.f32() : nullptr;
#pragma omp parallel for schedule(static) if (g.n * g.heads > 1)
  for (int64_t b = 0; b < g.n * g.heads; ++b) {
    const int64_t n = b / g.heads, h = b % g.heads;
    const float* q = base + n * t * w + h * dk;
    const float* k = q + g.heads * dk;
    const float* v = base + n * t * w + 2 * g.heads * dk + h * dv;
    float* p = pb + b * t * t;
    sgemm(false, true, t, t, dk, scale, q, w, k, w, 0.0f, p, t);
    for (int64_t i = 0; i < t; ++i) detail::attention_softmax_row(p + i * t, t, g.causal ? i + 1 : t);
    const float* used = p;
    if (dropout) {
      float* pd = sb + static_cast<int64_t>(omp_get_thread_num()) * 2 * t * t;
      for (int64_t i = 0; i < t; ++i)
        drop_row(*dropout, static_cast<uint64_t>((b * t + i) * t), p + i * t, pd + i * t, t);
      used = pd;
    }
    sgemm(false, false, t, dv, t, 1.0f, used, t, v, w, 0.0f, ob + n * t * hdv + h * dv, hdv);
  }
}

void attention_backward(const AttentionShape& g, const Tensor& qkv, const Tensor& probs, const Tensor& dout,
                        Tensor& dqkv, Tensor& scratch, const AttentionDropout* dropout) {
  check_all(g, qkv, probs);
  check(dout, Shape{g.n * g.t, g.heads * g.value_dim}, "the output gradient");
  check(dqkv, qkv.shape(), "dqkv");
  const int64_t t = g.t, dk = g.key_dim, dv = g.value_dim, w = g.width(), hdv = g.heads * dv;
  const int64_t blocks = dropout ? 2 : 1;  // dP, and the dropped probabilities
  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  ensure(scratch, Shape{static_cast<int64_t>(omp_get_max_threads()) * blocks * t * t}, DType::F32, Device::cpu());
  const float* base = qkv.f32();
  const float* pb = probs.f32();
  const float* gb = dout.f32();
  float* db = dqkv.f32();
  float* sb = scratch.f32();
#pragma omp parallel for schedule(static) if (g.n * g.heads > 1)
  for (int64_t b = 0; b < g.n * g.heads; ++b) {
    const int64_t n = b / g.heads, h = b % g.heads;
    const int64_t q_off = n * t * w + h * dk, k_off = q_off + g.heads * dk,
                  v_off = n * t * w + 2 * g.heads * dk + h * dv;
    const float* p = pb + b * t * t;
    const float* go = gb + n * t * hdv + h * dv;
    float* ds = sb + static_cast<int64_t>(omp_get_thread_num()) * blocks * t * t;
    const float* used = p;
    if (dropout) {
      float* pd = ds + t * t;
      for (int64_t i = 0; i < t; ++i)
        drop_row(*dropout, static_cast<uint64_t>((b * t + i) * t), p + i * t, pd + i * t, t);
      used = pd;
    }
    sgemm(true, false, t, dv, t, 1.0f, used, t, go, hdv, 0.0f, db + v_off, w);  // dV = P^T dO
    sgemm(false, true, t, t, dv, 1.0f, go, hdv, base + v_off, w, 0.0f, ds, t);  // dP = dO V^T
    if (dropout)
      for (int64_t i = 0; i < t; ++i)
        drop_row(*dropout, static_cast<uint64_t>((b * t + i) * t), ds + i * t, ds + i * t, t);
    for (int64_t i = 0; i < t; ++i) detail::attention_softmax_backward_row(p + i * t, ds + i * t, t, scale);
    sgemm(false, false, t, dk, t, 1.0f, ds, t, base + k_off, w, 0.0f, db + q_off, w);  // dQ = dS K
    sgemm(true, false, t, dk, t, 1.0f, ds, t, base + q_off, w, 0.0f, db + k_off, w);   // dK = dS^T Q
  }
}

}  // namespace ember::cpu
