// The mixed_bf16 policy on the GPU: Dense on cuBLAS's bf16 GEMM and Conv2D on cuDNN's bf16
// convolutions, held against the exact sums (in double) of the same bf16-rounded operands and
// against the CPU's bf16 path where this CPU has one. Outputs start as NaN on the device, so an
// op that writes nothing fails. Skips, saying why, without a GPU of compute capability 8.0 or
// later; scripts/gpu_check.sh runs it on a machine with one.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.h"
#include "layers/cpu/bf16.h"
#include "layers/cpu/conv2d_bf16.h"
#include "layers/cpu/dense.h"
#include "layers/cuda/conv2d.h"
#include "layers/cuda/dense.h"
#include "layers/geometry.h"
#include "test_util.h"

namespace ember {
namespace {

const Device kGpu = Device::cuda(0);
const double kUnit32 = std::ldexp(1.0, -23);  // fp32's spacing at 1: a truncated or rounded addition's bound
const double kBf16Out = std::ldexp(1.0, -8);  // one rounding to bf16 (8 significant bits), whatever its mode

class Bf16Gpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no usable GPU: " << cuda_status().reason;
    if (cuda_status().gpus.empty() || cuda_status().gpus[0].cc_major < 8)
      GTEST_SKIP() << "cuda:0 has no bf16 tensor cores (compute capability below 8.0)";
    // Deterministic algorithms: no atomics, so each bf16 result is one fp32 sum rounded once.
    set_gpu_deterministic(true);
  }
  test::GpuSettingsScope settings_;  // restored however the test ends
  cuda::Context& ctx() { return cuda::context(0); }
  // A device tensor full of NaN in `layout`: whatever the op does not write stays NaN.
  static Tensor nan_on_gpu(const Shape& s, Layout layout = Layout::RowMajor) {
    Tensor t = Tensor::empty(s, DType::F32, Device::cpu(), layout);
    t.fill(std::numeric_limits<float>::quiet_NaN());
    return t.to(kGpu);
  }
};

// The values a bf16 path computes with: each rounded to bf16 (the CPU's rounding, which the GPU's
// conversion kernel must equal).
std::vector<double> rounded(const Tensor& t) {
  std::vector<double> out;
  for (float v : t.to_vector()) out.push_back(cpu::from_bf16(cpu::to_bf16(v)));
  return out;
}

// An exact sum of products and the sum of their magnitudes, per output element.
struct Sums {
  std::vector<double> value, scale;
  explicit Sums(size_t n) : value(n, 0.0), scale(n, 0.0) {}
  void add(size_t i, double a, double b) {
    value[i] += a * b;
    scale[i] += std::abs(a * b);
  }
};

// Every |got - want| within out_rel * |rounded[i]| (one rounding of the value that was rounded: the
// result, or a convolution's sum before its bias) + units * 2^-23 * scale (the accumulation's: at
// most one rounding of the running sum per term). Counts the failures and prints the first.
int64_t beyond(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& scale,
               double out_rel, const std::vector<double>& rounded, double units, const std::string& what) {
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double bound = out_rel * std::abs(rounded[i]) + units * kUnit32 * scale[i];
    if (!(std::abs(got[i] - want[i]) <= bound)) {
      if (bad++ == 0)
        ADD_FAILURE() << what << "[" << i << "]: " << got[i] << " vs " << want[i] << " (bound " << bound << ")";
    }
  }
  return bad;
}

TEST_F(Bf16Gpu, DenseMatchesTheExactSumsAndTheCpu) {
  for (const auto& [n, in, out] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{37, 131, 29}, {64, 300, 70}}) {
    const Tensor x = test::random_tensor(Shape{n, in}, 5), w = test::random_tensor(Shape{out, in}, 6, -0.2f, 0.2f),
                 b = test::random_tensor(Shape{out}, 7), dy = test::random_tensor(Shape{n, out}, 8);
    Tensor yg = nan_on_gpu(Shape{n, out}), dzg = nan_on_gpu(Shape{n, out}), dxg = nan_on_gpu(x.shape()),
           dwg = nan_on_gpu(w.shape()), dbg = nan_on_gpu(b.shape());
    const Tensor xg = x.to(kGpu), wg = w.to(kGpu), bg = b.to(kGpu), dyg = dy.to(kGpu);
    cuda::dense_forward(ctx(), xg, wg, bg, false, yg, nullptr, /*bf16=*/true);
    cuda::dense_backward(ctx(), xg, wg, yg, dyg, false, dzg, &dxg, dwg, dbg, nullptr, /*bf16=*/true);
    ctx().synchronize();

    const std::vector<double> xr = rounded(x), wr = rounded(w), gr = rounded(dy);
    const std::vector<float> bv = b.to_vector(), dyv = dy.to_vector();
    Sums y(n * out), dx(n * in), dw(out * in), db(out);
    for (int64_t r = 0; r < n; ++r)
      for (int64_t o = 0; o < out; ++o) {
        for (int64_t i = 0; i < in; ++i) {
          y.add(r * out + o, xr[r * in + i], wr[o * in + i]);
          dx.add(r * in + i, gr[r * out + o], wr[o * in + i]);
          dw.add(o * in + i, gr[r * out + o], xr[r * in + i]);
        }
        db.add(o, dyv[r * out + o], 1.0);  // fp32 values: the bias gradient is not rounded
      }
    for (int64_t i = 0; i < n * out; ++i) {  // + the bias: one more fp32 addition
      y.value[i] += bv[i % out];
      y.scale[i] += std::abs(bv[i % out]);
    }
    // fp32 results of bf16 products (exact in fp32) summed in fp32: `in`, `out` or `n` additions.
    const std::string at = std::to_string(n) + "x" + std::to_string(in) + "->" + std::to_string(out);
    EXPECT_EQ(beyond(yg.to_vector(), y.value, y.scale, 0, y.value, double(in + 1), "y " + at), 0);
    EXPECT_EQ(beyond(dxg.to_vector(), dx.value, dx.scale, 0, dx.value, double(out), "dx " + at), 0);
    EXPECT_EQ(beyond(dwg.to_vector(), dw.value, dw.scale, 0, dw.value, double(n), "dw " + at), 0);
    EXPECT_EQ(beyond(dbg.to_vector(), db.value, db.scale, 0, db.value, double(n), "db " + at), 0);

    // The CPU's bf16 path: the same operands, its own sum order (within both paths' bounds).
    if (!cpu_bf16().available) continue;
    Tensor y_c = Tensor::empty(Shape{n, out}), dz_c = Tensor::empty(Shape{n, out}), dx_c = Tensor::empty(x.shape()),
           dw_c = Tensor::empty(w.shape()), db_c = Tensor::empty(b.shape());
    cpu::Bf16Buffers keep;
    cpu::dense_forward_bf16(x, w, b, false, y_c, keep);
    cpu::dense_backward_bf16(w, y_c, dy, false, dz_c, &dx_c, dw_c, db_c, keep);
    const auto as_double = [](const Tensor& t) {
      const std::vector<float> v = t.to_vector();
      return std::vector<double>(v.begin(), v.end());
    };
    EXPECT_EQ(beyond(yg.to_vector(), as_double(y_c), y.scale, 0, y.value, 2.0 * double(in + 1), "y vs cpu " + at), 0);
    EXPECT_EQ(beyond(dxg.to_vector(), as_double(dx_c), dx.scale, 0, dx.value, 2.0 * double(out), "dx vs cpu " + at), 0);
    EXPECT_EQ(beyond(dwg.to_vector(), as_double(dw_c), dw.scale, 0, dw.value, 2.0 * double(n), "dw vs cpu " + at), 0);
    EXPECT_EQ(beyond(dbg.to_vector(), as_double(db_c), db.scale, 0, db.value, 2.0 * double(n), "db vs cpu " + at), 0);
  }
}

// The reference geometry: 2 images of 8 channels, 9x10, 16 filters of 3x3 (72 products per output:
// the policy's bf16 side), SAME (symmetric) or VALID with stride 2.
Conv2dShape geometry(int64_t stride, Padding padding, bool relu) {
  Conv2dShape g;
  g.n = 2, g.c = 8, g.h = 9, g.w = 10, g.k = 16, g.r = 3, g.s = 3, g.stride_h = stride, g.stride_w = stride;
  g.relu = relu;
  const AxisGeometry ah = axis_geometry(g.h, g.r, stride, padding), aw = axis_geometry(g.w, g.s, stride, padding);
  g.pad_top = ah.pad_before, g.pad_bottom = ah.pad_after, g.p = ah.out;
  g.pad_left = aw.pad_before, g.pad_right = aw.pad_after, g.q = aw.out;
  return g;
}

// NCHW and NHWC activations (KCRS and KRSC bf16 filters), with and without the fused ReLU.
TEST_F(Bf16Gpu, Conv2dMatchesTheExactSumsAndTheCpu) {
  for (const Layout act : {Layout::RowMajor, Layout::NHWC})
    for (const bool relu : {false, true})
      for (const auto& [name, g] : std::vector<std::pair<std::string, Conv2dShape>>{
               {"same", geometry(1, Padding::Same, relu)}, {"valid stride 2", geometry(2, Padding::Valid, relu)}}) {
        const std::string label = name + (act == Layout::NHWC ? ", NHWC" : ", NCHW") + (relu ? ", relu" : "");
        Tensor x = test::random_tensor(Shape{g.n, g.c, g.h, g.w}, 21);
        // The second image is all zeros: its outputs are exactly the bias (no product is non-zero).
        std::fill(x.data<float>() + g.c * g.h * g.w, x.data<float>() + 2 * g.c * g.h * g.w, 0.0f);
        const Tensor w = test::random_tensor(Shape{g.k, g.c, g.r, g.s}, 22, -0.3f, 0.3f),
                     b = test::random_tensor(Shape{g.k}, 23), dy = test::random_tensor(Shape{g.n, g.k, g.p, g.q}, 24);
        Tensor yg = nan_on_gpu(dy.shape(), act), dxg = nan_on_gpu(x.shape(), act), dwg = nan_on_gpu(w.shape()),
               dbg = nan_on_gpu(b.shape());
        detail::GpuPlanSlot slot;
        const Tensor xg = x.to_layout(act).to(kGpu), wg = w.to(kGpu), bg = b.to(kGpu), dyg = dy.to_layout(act).to(kGpu);
        cuda::conv2d_forward(ctx(), g, xg, wg, bg, yg, slot, /*bf16=*/true);
        cuda::conv2d_backward(ctx(), g, xg, wg, yg, dyg, &dxg, dwg, dbg, false, slot, /*bf16=*/true);
        ctx().synchronize();

        const std::vector<double> xr = rounded(x), wr = rounded(w);
        const std::vector<float> bv = b.to_vector(), dyv = dy.to_vector();
        Sums s(dy.numel());  // the sums before the bias
        for (int64_t in = 0; in < g.n; ++in)
          for (int64_t k = 0; k < g.k; ++k)
            for (int64_t p = 0; p < g.p; ++p)
              for (int64_t q = 0; q < g.q; ++q)
                for (int64_t c = 0; c < g.c; ++c)
                  for (int64_t r = 0; r < g.r; ++r)
                    for (int64_t t = 0; t < g.s; ++t) {
                      const int64_t h = p * g.stride_h - g.pad_top + r, v = q * g.stride_w - g.pad_left + t;
                      if (h < 0 || h >= g.h || v < 0 || v >= g.w) continue;
                      s.add(((in * g.k + k) * g.p + p) * g.q + q, xr[((in * g.c + c) * g.h + h) * g.w + v],
                            wr[((k * g.c + c) * g.r + r) * g.s + t]);
                    }
        const int64_t plane = g.p * g.q;
        // The output gradient the kernels see: dy where the ReLU passed (the GPU's own y > 0).
        const std::vector<float> ygv = yg.to_vector();
        std::vector<float> dym = dyv;
        if (relu)
          for (size_t i = 0; i < dym.size(); ++i) dym[i] = ygv[i] > 0.0f ? dym[i] : 0.0f;
        std::vector<double> gr;
        for (float v : dym) gr.push_back(cpu::from_bf16(cpu::to_bf16(v)));
        Sums y(dy.numel()), dx(x.numel()), dw(w.numel()), db(b.numel());
        for (size_t i = 0; i < s.value.size(); ++i) {
          const double bias = bv[(static_cast<int64_t>(i) / plane) % g.k];
          y.value[i] = s.value[i] + bias;
          if (relu) y.value[i] = std::max(y.value[i], 0.0);  // max(., 0) moves nothing further apart
          y.scale[i] = s.scale[i] + std::abs(bias);
        }
        for (int64_t in = 0; in < g.n; ++in)
          for (int64_t k = 0; k < g.k; ++k)
            for (int64_t p = 0; p < g.p; ++p)
              for (int64_t q = 0; q < g.q; ++q) {
                const int64_t yi = ((in * g.k + k) * g.p + p) * g.q + q;
                db.add(k, dym[yi], 1.0);
                for (int64_t c = 0; c < g.c; ++c)
                  for (int64_t r = 0; r < g.r; ++r)
                    for (int64_t t = 0; t < g.s; ++t) {
                      const int64_t h = p * g.stride_h - g.pad_top + r, v = q * g.stride_w - g.pad_left + t;
                      if (h < 0 || h >= g.h || v < 0 || v >= g.w) continue;
                      const int64_t xi = ((in * g.c + c) * g.h + h) * g.w + v, wi = ((k * g.c + c) * g.r + r) * g.s + t;
                      dx.add(xi, gr[yi], wr[wi]);
                      dw.add(wi, gr[yi], xr[xi]);
                    }
              }
        // cuDNN writes the sums of y (before the bias), dx and dw in bf16: one rounding of each (2^-8
        // of the sum it rounds: y's before the bias is added) after fp32 sums of C*R*S = 72 (y),
        // K*R*S = 144 (dx) or N*P*Q (dw) products; the bias added in fp32 (one more unit on y's
        // scale); db a fp32 sum of N*P*Q values.
        const int64_t terms_y = g.c * g.r * g.s, terms_dx = g.k * g.r * g.s, terms_w = g.n * plane;
        EXPECT_EQ(beyond(ygv, y.value, y.scale, kBf16Out, s.value, double(terms_y + 1), "y " + label), 0);
        EXPECT_EQ(beyond(dxg.to_vector(), dx.value, dx.scale, kBf16Out, dx.value, double(terms_dx), "dx " + label), 0);
        EXPECT_EQ(beyond(dwg.to_vector(), dw.value, dw.scale, kBf16Out, dw.value, double(terms_w), "dw " + label), 0);
        EXPECT_EQ(beyond(dbg.to_vector(), db.value, db.scale, 0, db.value, double(terms_w), "db " + label), 0);
        for (int64_t i = g.k * plane; i < 2 * g.k * plane; ++i) {  // the zero image: exactly the bias
          const float bias = bv[(i / plane) % g.k];
          ASSERT_EQ(ygv[i], relu ? std::max(bias, 0.0f) : bias) << label << " at " << i;
        }
        EXPECT_NE(cuda::conv2d_kernel_info(ctx(), g, true).find("bf16"), std::string::npos);

        // A layer of the same shape without the ReLU after one with it (one plan serves both):
        // its outputs are the pre-activations, of which the first's are max(., 0), bit for bit.
        if (relu) {
          Conv2dShape linear = g;
          linear.relu = false;
          Tensor zg = nan_on_gpu(dy.shape(), act);
          cuda::conv2d_forward(ctx(), linear, xg, wg, bg, zg, slot, /*bf16=*/true);
          const std::vector<float> zv = zg.to_vector();
          int64_t negative = 0;
          for (size_t i = 0; i < zv.size(); ++i) {
            ASSERT_EQ(ygv[i], std::max(zv[i], 0.0f)) << label << " at " << i;
            negative += zv[i] < 0.0f;
          }
          EXPECT_GT(negative, 0) << label;  // the ReLU had something to cut
        }

        // The CPU's bf16 path (NHWC inside) on the same gradient: its fp32 results against the GPU's,
        // within both bounds.
        if (!cpu_bf16().available) continue;
        Conv2dShape plain = g;  // the mask already applied to dym
        plain.relu = false;
        Tensor dym_t = Tensor::empty(dy.shape());
        std::copy(dym.begin(), dym.end(), dym_t.data<float>());
        const Tensor xn = x.to_layout(Layout::NHWC), dyn = dym_t.to_layout(Layout::NHWC);
        Tensor y_c = Tensor::empty(dy.shape(), DType::F32, Device::cpu(), Layout::NHWC);
        Tensor dx_c = Tensor::empty(x.shape(), DType::F32, Device::cpu(), Layout::NHWC);
        Tensor dw_c = Tensor::empty(w.shape()), db_c = Tensor::empty(b.shape());
        cpu::Bf16Buffers keep;
        cpu::conv2d_forward_bf16(plain, xn, w, b, y_c, keep);
        cpu::conv2d_backward_bf16(plain, w, y_c, dyn, &dx_c, dw_c, db_c, false, keep);
        const auto logical = [](const Tensor& t) {
          const std::vector<float> v = t.to_layout(Layout::RowMajor).to_vector();
          return std::vector<double>(v.begin(), v.end());
        };
        std::vector<double> y_cpu = logical(y_c);  // pre-activation: the ReLU applied here
        if (relu)
          for (double& v : y_cpu) v = std::max(v, 0.0);
        EXPECT_EQ(beyond(ygv, y_cpu, y.scale, kBf16Out, s.value, 2.0 * double(terms_y + 1), "y vs cpu " + label), 0);
        EXPECT_EQ(beyond(dxg.to_vector(), logical(dx_c), dx.scale, kBf16Out, dx.value, 2.0 * double(terms_dx),
                         "dx vs cpu " + label),
                  0);
        EXPECT_EQ(beyond(dwg.to_vector(), logical(dw_c), dw.scale, kBf16Out, dw.value, 2.0 * double(terms_w),
                         "dw vs cpu " + label),
                  0);
        EXPECT_EQ(
            beyond(dbg.to_vector(), logical(db_c), db.scale, 0, db.value, 2.0 * double(terms_w), "db vs cpu " + label),
            0);
      }
}

// The policy resolves for the GPU: mixed_bf16 on cuda:0 (compute capability >= 8.0 here).
TEST_F(Bf16Gpu, ThePolicyResolvesForThisGpu) {
  EXPECT_EQ(resolve_precision(Precision::MixedBFloat16, kGpu, true), Precision::MixedBFloat16);
  EXPECT_THROW(resolve_precision(Precision::MixedBFloat16, Device::cuda(64), true), DeviceError);
}

}  // namespace
}  // namespace ember
