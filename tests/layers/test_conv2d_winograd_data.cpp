// The Winograd F(4x4, 3x3) forward and backward-data (layers/cpu/conv2d_winograd.h) against direct
// sums in double, on shapes that cover partial tiles, padding, groups across images with a last
// partial group, and each of the GEMMs' register blocks; which shapes they take; outputs
// written everywhere; the same bits at any thread count and for any share of the batch. The
// kernels are AVX-512 only: on a CPU without it the tests check that fits() says no and skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/cpu/cpu_features.h"
#include "layers/cpu/conv2d.h"
#include "layers/cpu/conv2d_winograd.h"
#include "test_util.h"

namespace ember {
namespace {

Conv2dShape shape(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t pad) {
  Conv2dShape g;
  g.n = n, g.c = c, g.h = h, g.w = w, g.k = k, g.r = 3, g.s = 3;
  g.pad_top = g.pad_left = g.pad_bottom = g.pad_right = pad;
  g.p = h + 2 * pad - 2, g.q = w + 2 * pad - 2;
  return g;
}

bool have_kernels() { return cpu::conv2d_winograd_forward_fits(shape(1, 16, 6, 6, 16, 0)); }

#define SKIP_WITHOUT_AVX512()                                                                    \
  if (!have_kernels()) {                                                                         \
    EXPECT_FALSE(ember::cpu_avx512()) << "fits() said no on an AVX-512 CPU";                     \
    GTEST_SKIP() << "no AVX-512 on this CPU: the Winograd forward and backward-data do not run"; \
  }

struct Reference {
  std::vector<double> out;
  std::vector<double> scale;  // per output: the sum of |products| (and |bias|), what rounding is relative to
};

// y[n][p][q][k] = b[k] + sum over c, r, s of x[n][p + r - pad][q + s - pad][c] * w[k][c][r][s].
Reference forward(const Conv2dShape& g, const float* x, const float* w, const float* b) {
  Reference ref;
  ref.out.resize(size_t(g.n * g.p * g.q * g.k));
  ref.scale.resize(ref.out.size());
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t p = 0; p < g.p; ++p)
      for (int64_t q = 0; q < g.q; ++q)
        for (int64_t k = 0; k < g.k; ++k) {
          double sum = b[k], abs = std::fabs(b[k]);
          for (int64_t r = 0; r < 3; ++r)
            for (int64_t s = 0; s < 3; ++s) {
              const int64_t h = p + r - g.pad_top, v = q + s - g.pad_left;
              if (h < 0 || h >= g.h || v < 0 || v >= g.w) continue;
              for (int64_t c = 0; c < g.c; ++c) {
                const double t = double(x[((n * g.h + h) * g.w + v) * g.c + c]) * w[((k * g.c + c) * 3 + r) * 3 + s];
                sum += t, abs += std::fabs(t);
              }
            }
          const size_t i = size_t(((n * g.p + p) * g.q + q) * g.k + k);
          ref.out[i] = g.relu ? std::max(sum, 0.0) : sum;
          ref.scale[i] = abs;
        }
  return ref;
}

// dx[n][h][v][c] = sum over k, r, s of dy[n][h - r + pad][v - s + pad][k] * w[k][c][r][s].
Reference backward_data(const Conv2dShape& g, const float* dy, const float* w) {
  Reference ref;
  ref.out.resize(size_t(g.n * g.h * g.w * g.c));
  ref.scale.resize(ref.out.size());
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t h = 0; h < g.h; ++h)
      for (int64_t v = 0; v < g.w; ++v)
        for (int64_t c = 0; c < g.c; ++c) {
          double sum = 0, abs = 0;
          for (int64_t r = 0; r < 3; ++r)
            for (int64_t s = 0; s < 3; ++s) {
              const int64_t p = h - r + g.pad_top, q = v - s + g.pad_left;
              if (p < 0 || p >= g.p || q < 0 || q >= g.q) continue;
              for (int64_t k = 0; k < g.k; ++k) {
                const double t = double(dy[((n * g.p + p) * g.q + q) * g.k + k]) * w[((k * g.c + c) * 3 + r) * 3 + s];
                sum += t, abs += std::fabs(t);
              }
            }
          const size_t i = size_t(((n * g.h + h) * g.w + v) * g.c + c);
          ref.out[i] = sum;
          ref.scale[i] = abs;
        }
  return ref;
}

// The worst error relative to each output's sum of |products| (NaN, e.g. an output never
// written over the NaN prefill, counts as infinite).
double worst_error(const std::vector<float>& got, const Reference& ref) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(double(got[i]) - ref.out[i]) / (ref.scale[i] + 1e-30);
    worst = std::max(worst, std::isnan(e) ? std::numeric_limits<double>::infinity() : e);
  }
  return worst;
}

// The same relative to the largest output's sum of |products|: on sparse inputs a live output whose
// window holds one small value carries the rounding of its tile's larger values, which its own sum
// does not bound; a live output written as dead is off by its whole value (~1e-2 of the largest
// here), a dead one written live by the residue.
double worst_error_of_largest(const std::vector<float>& got, const Reference& ref) {
  double worst = 0, largest = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::fabs(double(got[i]) - ref.out[i]);
    worst = std::max(worst, std::isnan(e) ? std::numeric_limits<double>::infinity() : e);
    largest = std::max(largest, ref.scale[i]);
  }
  return worst / (largest + 1e-30);
}

// The transforms scale terms by up to ~10 (B^T) and 8 (A^T) per axis, and G by 1/6..1/24, so each
// product carries a few float roundings of intermediate values up to ~1e2 times its own size.
// Measured on these shapes, relative to each output's sum of |products|: forward 3.6e-7..9.5e-7,
// backward-data 9.3e-7..8.4e-6 (its edge outputs sum 1 to 6 taps, but carry the rounding of the
// whole tile's). Allowed: 3e-6 and 2e-5, 2.4x to 3x. One coefficient of G off by 0.1% measured
// 8.5e-5..1e-3. Structural zeros are held bit for bit (StructuralZerosAreExact).
constexpr double kForwardTolerance = 3e-6, kBackwardDataTolerance = 2e-5;

struct Case {
  int64_t n, c, h, w, k, pad;
};

class WinogradData : public ::testing::TestWithParam<Case> {};

TEST_P(WinogradData, ForwardMatchesTheDirectSum) {
  SKIP_WITHOUT_AVX512();
  const Case cs = GetParam();
  for (const bool relu : {false, true}) {
    Conv2dShape g = shape(cs.n, cs.c, cs.h, cs.w, cs.k, cs.pad);
    g.relu = relu;
    ASSERT_TRUE(cpu::conv2d_winograd_forward_fits(g)) << g.str();
    const Tensor x = test::random_tensor(Shape{g.n, g.h, g.w, g.c}, 1, 0.0f, 2.0f);
    const Tensor w = test::random_tensor(Shape{g.k, g.c, 3, 3}, 2, -0.2f, 0.2f);
    const Tensor b = test::random_tensor(Shape{g.k}, 3, -0.5f, 0.5f);
    const Reference ref = forward(g, x.f32(), w.f32(), b.f32());
    std::vector<float> y(ref.out.size(), std::numeric_limits<float>::quiet_NaN());
    cpu::WinogradConvScratch scratch;
    cpu::conv2d_winograd_forward(g, x.f32(), w.f32(), b.f32(), y.data(), scratch);
    const double e = worst_error(y, ref);
    std::printf("%s%s forward: %.3g\n", g.str().c_str(), relu ? " relu" : "", e);
    EXPECT_LT(e, kForwardTolerance) << g.str();
  }
}

TEST_P(WinogradData, BackwardDataMatchesTheDirectSum) {
  SKIP_WITHOUT_AVX512();
  const Case cs = GetParam();
  const Conv2dShape g = shape(cs.n, cs.c, cs.h, cs.w, cs.k, cs.pad);
  ASSERT_TRUE(cpu::conv2d_winograd_backward_data_fits(g)) << g.str();
  const Tensor dy = test::random_tensor(Shape{g.n, g.p, g.q, g.k}, 4);
  const Tensor w = test::random_tensor(Shape{g.k, g.c, 3, 3}, 5, -0.2f, 0.2f);
  const Reference ref = backward_data(g, dy.f32(), w.f32());
  std::vector<float> dx(ref.out.size(), std::numeric_limits<float>::quiet_NaN());
  cpu::WinogradConvScratch scratch;
  cpu::conv2d_winograd_backward_data(g, dy.f32(), w.f32(), dx.data(), scratch);
  const double e = worst_error(dx, ref);
  std::printf("%s backward-data: %.3g\n", g.str().c_str(), e);
  EXPECT_LT(e, kBackwardDataTolerance) << g.str();
}

// Structural zeros: an output whose 3x3 window of the input holds only zeros (+-0 in every
// channel) is what the direct sum gives, bit for bit: exactly relu(bias) forward, exactly 0 for
// dx; every other output is the direct sum's to the rounding the dense tests allow (a mask that
// wrongly marks a live output dead fails there). The input is as MNIST's background after ReLU and
// pooling: pixels zero in every channel (a third of them -0); the others hold one non-zero
// channel, at random, so that the mask's OR over channel vectors is tested too; most tiles mix
// both, and the transforms would spread the non-zero values over the zero windows' outputs as
// rounding residue (3.6e-7 here; before the mask one such output in two came out positive and
// passed the ReLU).
Tensor sparse_pixels(const Shape& nhwc, uint64_t seed, double nonzero_share) {
  Tensor t = test::random_tensor(nhwc, seed, 0.1f, 2.0f);
  const Tensor pick = test::random_tensor(Shape{nhwc[0] * nhwc[1] * nhwc[2]}, seed + 1, 0.0f, 1.0f);
  const Tensor channel = test::random_tensor(Shape{pick.numel()}, seed + 2, 0.0f, 1.0f);
  const int64_t c = nhwc[3];
  for (int64_t i = 0; i < pick.numel(); ++i) {
    const float u = pick.f32()[i];
    const int64_t keep = u < nonzero_share ? std::min(c - 1, int64_t(channel.f32()[i] * float(c))) : -1;
    const float zero = u < nonzero_share + (1 - nonzero_share) / 3 ? -0.0f : 0.0f;
    for (int64_t j = 0; j < c; ++j)
      if (j != keep) t.f32()[i * c + j] = zero;
  }
  return t;
}

// Whether the 3x3 window at (p, q) of image n of in (NHWC, h x w x c; zeros outside) is all zero.
bool window_is_zero(const float* in, int64_t n, int64_t h, int64_t w, int64_t c, int64_t top, int64_t left) {
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t s = 0; s < 3; ++s) {
      const int64_t y = top + r, x = left + s;
      if (y < 0 || y >= h || x < 0 || x >= w) continue;
      for (int64_t i = 0; i < c; ++i)
        if (in[((n * h + y) * w + x) * c + i] != 0.0f) return false;
    }
  return true;
}

TEST_P(WinogradData, StructuralZerosAreExact) {
  SKIP_WITHOUT_AVX512();
  const Case cs = GetParam();
  Conv2dShape g = shape(cs.n, cs.c, cs.h, cs.w, cs.k, cs.pad);
  const Tensor x = sparse_pixels(Shape{g.n, g.h, g.w, g.c}, 21, 0.15);
  const Tensor w = test::random_tensor(Shape{g.k, g.c, 3, 3}, 22, -0.2f, 0.2f);
  Tensor b = test::random_tensor(Shape{g.k}, 23, -0.5f, 0.5f);
  b.f32()[0] = 0.0f;  // Keras' initial bias: relu(0 + residue) was the failure
  const Tensor dy = sparse_pixels(Shape{g.n, g.p, g.q, g.k}, 24, 0.15);
  cpu::WinogradConvScratch scratch;
  int64_t zero = 0, live = 0;
  for (const bool relu : {false, true}) {
    g.relu = relu;
    std::vector<float> y(size_t(g.n * g.p * g.q * g.k), std::numeric_limits<float>::quiet_NaN());
    cpu::conv2d_winograd_forward(g, x.f32(), w.f32(), b.f32(), y.data(), scratch);
    EXPECT_LT(worst_error_of_largest(y, forward(g, x.f32(), w.f32(), b.f32())), kForwardTolerance) << g.str();
    for (int64_t n = 0; n < g.n; ++n)
      for (int64_t p = 0; p < g.p; ++p)
        for (int64_t q = 0; q < g.q; ++q) {
          const bool z = window_is_zero(x.f32(), n, g.h, g.w, g.c, p - g.pad_top, q - g.pad_left);
          (z ? zero : live) += 1;
          if (!z) continue;
          for (int64_t k = 0; k < g.k; ++k) {
            const float want = relu ? std::max(b.f32()[k], 0.0f) : b.f32()[k];
            ASSERT_EQ(y[size_t(((n * g.p + p) * g.q + q) * g.k + k)], want)
                << g.str() << " output (" << n << ", " << p << ", " << q << ", " << k << ")";
          }
        }
  }
  std::vector<float> dx(size_t(g.n * g.h * g.w * g.c), std::numeric_limits<float>::quiet_NaN());
  cpu::conv2d_winograd_backward_data(g, dy.f32(), w.f32(), dx.data(), scratch);
  EXPECT_LT(worst_error_of_largest(dx, backward_data(g, dy.f32(), w.f32())), kBackwardDataTolerance) << g.str();
  for (int64_t n = 0; n < g.n; ++n)
    for (int64_t h = 0; h < g.h; ++h)
      for (int64_t v = 0; v < g.w; ++v) {
        // dx at (h, v) reads dy at (h - r + pad, v - s + pad): the window from h + pad - 2.
        const bool z = window_is_zero(dy.f32(), n, g.p, g.q, g.k, h + g.pad_top - 2, v + g.pad_left - 2);
        (z ? zero : live) += 1;
        if (!z) continue;
        for (int64_t c = 0; c < g.c; ++c)
          ASSERT_EQ(dx[size_t(((n * g.h + h) * g.w + v) * g.c + c)], 0.0f)
              << g.str() << " input gradient (" << n << ", " << h << ", " << v << ", " << c << ")";
      }
  // Both kinds are common, so the case is neither vacuous nor all zeros.
  EXPECT_GT(zero, (zero + live) / 10) << g.str();
  EXPECT_GT(live, (zero + live) / 10) << g.str();
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, WinogradData,
    ::testing::Values(Case{9, 32, 13, 13, 64,
                           0},  // the reference CNN's conv2d_1: 3x3 tiles per image (the last
                                // row and column partial), groups of 24 tiles across images, the last of 9;
                                // its backward-data 4x4 tiles, dy read from 2 before its edge
                      Case{3, 16, 8, 8, 16, 1},      // SAME padding; 16 out-channels: the 1-vector GEMM block
                      Case{1, 16, 38, 41, 32, 0},    // one image of 9x10 tiles: 4 groups, the last of 18
                      Case{5, 48, 6, 7, 32, 1},      // outputs 6x7: two tiles each way, the second partial
                      Case{2, 64, 12, 12, 48, 0}));  // 48 channels out: 3 one-vector blocks; backward 64 of 4

TEST(WinogradDataShapes, TakeOnly3x3Stride1WithVectorChannelsAndTiles) {
  SKIP_WITHOUT_AVX512();
  EXPECT_TRUE(cpu::conv2d_winograd_forward_fits(shape(1, 32, 13, 13, 64, 0)));
  EXPECT_TRUE(cpu::conv2d_winograd_backward_data_fits(shape(1, 32, 13, 13, 64, 0)));
  Conv2dShape g = shape(1, 32, 13, 13, 64, 0);
  g.r = g.s = 5, g.p = g.q = 9;
  EXPECT_FALSE(cpu::conv2d_winograd_forward_fits(g));  // 5x5 kernels
  g = shape(1, 32, 13, 13, 64, 0);
  g.stride_h = g.stride_w = 2, g.p = g.q = 6;
  EXPECT_FALSE(cpu::conv2d_winograd_forward_fits(g));                                  // stride 2
  EXPECT_FALSE(cpu::conv2d_winograd_forward_fits(shape(1, 8, 13, 13, 64, 0)));         // C not a multiple of 16
  EXPECT_FALSE(cpu::conv2d_winograd_backward_data_fits(shape(1, 32, 13, 13, 40, 0)));  // K not either
  EXPECT_FALSE(cpu::conv2d_winograd_forward_fits(shape(1, 64, 5, 5, 64, 0)));          // 3x3 outputs: less than a tile
}

// Every output is computed by one thread from its own image alone: the same bits at one thread
// and two, every run (stale scratch does not leak in), and for an image alone as within a batch.
TEST(WinogradDataShapes, TheSameBitsAtAnyThreadCountAndForAnyShareOfTheBatch) {
  SKIP_WITHOUT_AVX512();
  Conv2dShape g = shape(7, 32, 13, 13, 64, 0);
  g.relu = true;
  const Tensor x = test::random_tensor(Shape{g.n, g.h, g.w, g.c}, 6, 0.0f, 2.0f);
  const Tensor w = test::random_tensor(Shape{g.k, g.c, 3, 3}, 7, -0.2f, 0.2f);
  const Tensor b = test::random_tensor(Shape{g.k}, 8, -0.5f, 0.5f);
  const Tensor dy = test::random_tensor(Shape{g.n, g.p, g.q, g.k}, 9);
  const size_t ys = size_t(g.n * g.p * g.q * g.k), xs = size_t(g.n * g.h * g.w * g.c);
  std::vector<float> y1(ys), y2(ys), dx1(xs), dx2(xs);
  const int threads = num_threads();
  set_num_threads(2);  // two threads whatever the machine's default, then one
  cpu::WinogradConvScratch scratch;
  cpu::conv2d_winograd_forward(g, x.f32(), w.f32(), b.f32(), y1.data(), scratch);
  cpu::conv2d_winograd_backward_data(g, dy.f32(), w.f32(), dx1.data(), scratch);
  cpu::WinogradConvScratch stale;
  stale.work.assign(scratch.work.size(), std::numeric_limits<float>::quiet_NaN());
  set_num_threads(1);
  cpu::conv2d_winograd_forward(g, x.f32(), w.f32(), b.f32(), y2.data(), stale);
  cpu::conv2d_winograd_backward_data(g, dy.f32(), w.f32(), dx2.data(), stale);
  set_num_threads(threads);
  EXPECT_EQ(y1, y2);
  EXPECT_EQ(dx1, dx2);
  // Image 5 alone (its 9 tiles in one group) as in the batch (its tiles 45-53 split over two groups).
  Conv2dShape one = g;
  one.n = 1;
  std::vector<float> y_one(ys / 7), dx_one(xs / 7);
  cpu::conv2d_winograd_forward(one, x.f32() + 5 * xs / 7, w.f32(), b.f32(), y_one.data(), scratch);
  cpu::conv2d_winograd_backward_data(one, dy.f32() + 5 * ys / 7, w.f32(), dx_one.data(), scratch);
  EXPECT_TRUE(std::equal(y_one.begin(), y_one.end(), y1.begin() + 5 * long(ys / 7)));
  EXPECT_TRUE(std::equal(dx_one.begin(), dx_one.end(), dx1.begin() + 5 * long(xs / 7)));
}

// Through conv2d_forward and conv2d_backward (the layer's CPU path), bias and ReLU fused: y as the
// direct sum's, dx from dy masked by y > 0.
TEST(WinogradDataShapes, AreWhatConv2dUsesForTheirShapes) {
  SKIP_WITHOUT_AVX512();
  Conv2dShape g = shape(5, 32, 13, 13, 64, 0);
  g.relu = true;
  const Tensor x = test::random_tensor(Shape{g.n, g.c, g.h, g.w}, 10, 0.0f, 2.0f).to_layout(Layout::NHWC);
  const Tensor w = test::random_tensor(Shape{g.k, g.c, 3, 3}, 11, -0.2f, 0.2f);
  const Tensor b = test::random_tensor(Shape{g.k}, 12, -0.5f, 0.5f);
  Tensor y = Tensor::empty(Shape{g.n, g.k, g.p, g.q}, DType::F32, Device::cpu(), Layout::NHWC);
  cpu::conv2d_forward(g, x, w, b, y);
  const Reference ref_y = forward(g, x.f32(), w.f32(), b.f32());
  EXPECT_LT(worst_error(std::vector<float>(y.f32(), y.f32() + y.numel()), ref_y), kForwardTolerance);
  const Tensor dy = test::random_tensor(Shape{g.n, g.k, g.p, g.q}, 13).to_layout(Layout::NHWC);
  Tensor dx = Tensor::empty(Shape{g.n, g.c, g.h, g.w}, DType::F32, Device::cpu(), Layout::NHWC);
  Tensor dw = Tensor::empty(Shape{g.k, g.c, 3, 3}), db = Tensor::empty(Shape{g.k});
  cpu::conv2d_backward(g, x, w, y, dy, &dx, dw, db);
  std::vector<float> masked(dy.f32(), dy.f32() + dy.numel());
  int64_t zeros = 0;
  for (int64_t i = 0; i < dy.numel(); ++i)
    if (!(y.f32()[i] > 0)) masked[size_t(i)] = 0, ++zeros;
  ASSERT_GT(zeros, dy.numel() / 10);  // the mask matters in this case
  const Reference ref_dx = backward_data(g, masked.data(), w.f32());
  EXPECT_LT(worst_error(std::vector<float>(dx.f32(), dx.f32() + dx.numel()), ref_dx), kBackwardDataTolerance);
  const std::string info = cpu::conv2d_kernel_info(g);
  EXPECT_NE(info.find("fwd ember winograd"), std::string::npos) << info;
  EXPECT_NE(info.find("bwd-data ember winograd"), std::string::npos) << info;
}

}  // namespace
}  // namespace ember
