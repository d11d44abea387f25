// Dropout's mask from the counter-based bits of layers/random_bits.h, element by element in
// memory order; NHWC tensors hash each element's row-major NCHW index, so the mask does not
// depend on the layout (nor on the thread count).
#include "dropout.h"

#include "../../core/error.h"

namespace ember::cpu {

namespace {
void check_like(const Tensor& t, const Tensor& ref, DType dt, const char* what) {
  EMBER_CHECK(
      t.shape() == ref.shape() && t.layout() == ref.layout() && t.dtype() == dt && t.device().is_cpu(), ShapeError,
      std::string("dropout (cpu): ") + what + " must be " + dtype_name(dt) + " like " + ref.str() + ", got " + t.str());
}
}  // namespace

void dropout_forward(const detail::DropoutParams& p, const Tensor& counter, const Tensor& x, Tensor& y, Tensor& mask) {
  EMBER_CHECK(counter.numel() == 2 && counter.dtype() == DType::F32 && counter.device().is_cpu(), ShapeError,
              "dropout (cpu): the step counter must be 2 f32 values, got " + counter.str());
  EMBER_CHECK(x.dtype() == DType::F32 && x.device().is_cpu() && (x.layout() == Layout::RowMajor || x.rank() == 4),
              ShapeError, "dropout (cpu): input must be an f32 cpu tensor, got " + x.str());
  check_like(y, x, DType::F32, "output");
  check_like(mask, x, DType::U8, "mask");
  const uint64_t key = detail::step_key(p.seed, detail::counter_value(counter.f32()));
  const float* in = x.f32();
  float* out = y.f32();
  uint8_t* keep = mask.data<uint8_t>();
  const int64_t n = x.numel();
  if (x.layout() == Layout::RowMajor) {
#pragma omp parallel for schedule(static) if (n > 32768)
    for (int64_t i = 0; i < n; ++i) {
      const bool k = detail::element_bits24(key, static_cast<uint64_t>(i)) >= p.threshold;
      keep[i] = k ? 1 : 0;
      out[i] = k ? in[i] * p.scale : 0.0f;
    }
    return;
  }
  const int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
#pragma omp parallel for collapse(2) schedule(static) if (n > 32768)
  for (int64_t b = 0; b < N; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t w = 0; w < W; ++w)
        for (int64_t c = 0; c < C; ++c) {
          const int64_t i = ((b * H + h) * W + w) * C + c;  // memory (NHWC)
          const int64_t logical = ((b * C + c) * H + h) * W + w;
          const bool k = detail::element_bits24(key, static_cast<uint64_t>(logical)) >= p.threshold;
          keep[i] = k ? 1 : 0;
          out[i] = k ? in[i] * p.scale : 0.0f;
        }
}

void dropout_advance(Tensor& counter) {
  EMBER_CHECK(counter.numel() == 2 && counter.dtype() == DType::F32 && counter.device().is_cpu(), ShapeError,
              "dropout (cpu): the step counter must be 2 f32 values, got " + counter.str());
  detail::counter_advance(counter.f32());
}

void dropout_backward(float scale, const Tensor& mask, const Tensor& dy, Tensor& dx) {
  check_like(mask, dy, DType::U8, "mask");
  check_like(dx, dy, DType::F32, "input gradient");
  EMBER_CHECK(dy.dtype() == DType::F32, ShapeError, "dropout (cpu): output gradient must be f32, got " + dy.str());
  const uint8_t* keep = mask.data<uint8_t>();
  const float* g = dy.f32();
  float* d = dx.f32();
  const int64_t n = dy.numel();
#pragma omp parallel for simd schedule(static) if (n > 32768)
  for (int64_t i = 0; i < n; ++i) d[i] = keep[i] ? g[i] * scale : 0.0f;
}

}  // namespace ember::cpu
