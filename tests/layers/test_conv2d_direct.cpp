// The direct NHWC weight gradient (layers/cpu/conv2d_direct.h) against a sum in double, on shapes
// that cover strides, padding on some sides only, non-square and 1x1 kernels, several register
// blocks each way and several chunks of images; the same bits at any thread count from a poisoned
// scratch; which shapes it takes; and that conv2d_backward uses it for the reference CNN's
// conv2d_2.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/cpu/cpu_features.h"
#include "layers/cpu/conv2d.h"
#include "layers/cpu/conv2d_direct.h"
#include "test_util.h"

namespace ember {
namespace {

struct Case {
  int64_t n, c, h, w, k, r, s, stride, pad_top, pad_left, pad_bottom, pad_right;
};

Conv2dShape shape(const Case& cs) {
  Conv2dShape g;
  g.n = cs.n, g.c = cs.c, g.h = cs.h, g.w = cs.w, g.k = cs.k, g.r = cs.r, g.s = cs.s;
  g.stride_h = g.stride_w = cs.stride;
  g.pad_top = cs.pad_top, g.pad_left = cs.pad_left, g.pad_bottom = cs.pad_bottom, g.pad_right = cs.pad_right;
  g.p = (g.h + g.pad_top + g.pad_bottom - g.r) / cs.stride + 1;
  g.q = (g.w + g.pad_left + g.pad_right - g.s) / cs.stride + 1;
  return g;
}

bool have_kernel() { return cpu::conv2d_direct_weight_gradient_fits(shape({1, 32, 5, 5, 8, 3, 3, 1, 0, 0, 0, 0})); }

#define SKIP_WITHOUT_AVX512()                                                          \
  if (!have_kernel()) {                                                                \
    EXPECT_FALSE(ember::cpu_avx512()) << "fits() said no on an AVX-512 CPU";           \
    GTEST_SKIP() << "no AVX-512 (or capped): the direct weight gradient does not run"; \
  }

struct Reference {
  std::vector<double> dw, db;
  std::vector<double> scale;  // per dw: the sum of |products|, what rounding is relative to
};

// dw[k][c][r][s] = sum over n, p, q of dy[n][p][q][k] * x[n][p * stride + r - pad_top][q * stride +
// s - pad_left][c] (NHWC, zeros outside x).
Reference direct(const Conv2dShape& g, const float* x, const float* dy) {
  Reference ref;
  ref.dw.resize(size_t(g.k * g.c * g.r * g.s));
  ref.scale.resize(ref.dw.size());
  ref.db.resize(size_t(g.k));
  for (int64_t k = 0; k < g.k; ++k) {
    for (int64_t i = 0; i < g.n * g.p * g.q; ++i) ref.db[size_t(k)] += dy[i * g.k + k];
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t r = 0; r < g.r; ++r)
        for (int64_t s = 0; s < g.s; ++s) {
          double sum = 0, abs = 0;
          for (int64_t n = 0; n < g.n; ++n)
            for (int64_t p = 0; p < g.p; ++p)
              for (int64_t q = 0; q < g.q; ++q) {
                const int64_t h = p * g.stride_h + r - g.pad_top, w = q * g.stride_w + s - g.pad_left;
                if (h < 0 || h >= g.h || w < 0 || w >= g.w) continue;
                const double t =
                    double(dy[((n * g.p + p) * g.q + q) * g.k + k]) * x[((n * g.h + h) * g.w + w) * g.c + c];
                sum += t, abs += std::fabs(t);
              }
          const size_t i = size_t(((k * g.c + c) * g.r + r) * g.s + s);
          ref.dw[i] = sum, ref.scale[i] = abs;
        }
  }
  return ref;
}

class DirectWeightGradient : public ::testing::TestWithParam<Case> {};

// Each dw is one float running sum of its products (fused multiply-adds), continued across chunks:
// its error is at most m u times the sum of |products| (m terms, u = 2^-24), 2.6e-4 for the longest
// sum here (4,332 terms), and about sqrt(m) u for random signs: measured 1.0e-7..2.0e-7. 1e-5 leaves
// 50x room; a lost row or column of positions, a tap's wrong offset or a lost chunk moves an output
// by a whole fraction of its terms (1e-2 or more).
constexpr double kTolerance = 1e-5;

// How many of dw's values lie beyond the tolerance (NaN, a value never written, among them).
int64_t outside_tolerance(const float* dw, const Reference& ref) {
  int64_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < ref.dw.size(); ++i) {
    const double err = std::fabs(dw[i] - ref.dw[i]);
    if (!(err <= kTolerance * ref.scale[i])) ++bad;
    if (ref.scale[i] > 0) worst = std::max(worst, err / ref.scale[i]);
  }
  std::printf("worst error %.3g of the sum of |products|\n", worst);
  return bad;
}

TEST_P(DirectWeightGradient, MatchesTheSumInDouble) {
  SKIP_WITHOUT_AVX512();
  const Conv2dShape g = shape(GetParam());
  ASSERT_TRUE(cpu::conv2d_direct_weight_gradient_fits(g)) << g.str();
  const Tensor x = test::random_tensor(Shape{g.n, g.h, g.w, g.c}, 1, 0.0f, 2.0f);  // after a ReLU
  const Tensor dy = test::random_tensor(Shape{g.n, g.p, g.q, g.k}, 2);
  const Reference ref = direct(g, x.f32(), dy.f32());
  std::vector<float> dw(ref.dw.size(), std::nanf("")), db(size_t(g.k), std::nanf(""));
  std::vector<float> scratch;
  cpu::conv2d_direct_weight_gradient(g, x.f32(), dy.f32(), dw.data(), db.data(), scratch);
  EXPECT_EQ(outside_tolerance(dw.data(), ref), 0) << g.str();
  // db sums n * p * q terms of |dy| <= 1 in double, rounded once: half a float unit of the result.
  for (int64_t k = 0; k < g.k; ++k)
    EXPECT_NEAR(db[size_t(k)], ref.db[size_t(k)], 1e-6 * (std::fabs(ref.db[size_t(k)]) + 1)) << "k " << k;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, DirectWeightGradient,
    ::testing::Values(
        Case{9, 64, 5, 5, 64, 3, 3, 1, 0, 0, 0, 0},   // the reference CNN's conv2d_2: 3x3 outputs, 2 x 8 blocks per tap
        Case{3, 32, 40, 40, 8, 3, 3, 1, 0, 0, 0, 0},  // images of ~250 KB: chunks of 2 images, the last of 1
        Case{4, 32, 9, 8, 24, 3, 3, 2, 1, 1, 1, 1},   // stride 2 with padding: taps with fewer valid rows
        Case{2, 96, 7, 6, 16, 2, 3, 1, 0, 1, 1, 1},   // a 2x3 kernel padded on some sides only (SAME, even)
        Case{3, 32, 6, 6, 8, 1, 1, 1, 0, 0, 0, 0},    // 1x1
        Case{2, 32, 11, 11, 16, 5, 5, 1, 2, 2, 2, 2},   // 5x5 SAME: taps reaching past an edge by 1 or 2
        Case{2, 32, 1, 1, 8, 3, 3, 1, 1, 1, 1, 1},      // a 1x1 image, 3x3 SAME: taps with no position at all
        Case{3, 32, 10, 11, 8, 3, 3, 3, 1, 1, 1, 1}));  // stride 3 with padding

TEST(DirectWeightGradient, TakesVectorChannelCountsOnAvx512) {
  SKIP_WITHOUT_AVX512();
  EXPECT_TRUE(cpu::conv2d_direct_weight_gradient_fits(shape({1, 32, 5, 5, 8, 3, 3, 1, 0, 0, 0, 0})));
  EXPECT_FALSE(cpu::conv2d_direct_weight_gradient_fits(shape({1, 16, 5, 5, 8, 3, 3, 1, 0, 0, 0, 0})));  // C % 32
  EXPECT_FALSE(cpu::conv2d_direct_weight_gradient_fits(shape({1, 32, 5, 5, 4, 3, 3, 1, 0, 0, 0, 0})));  // K % 8
  EXPECT_FALSE(cpu::conv2d_direct_weight_gradient_fits(shape({1, 1, 5, 5, 8, 3, 3, 1, 0, 0, 0, 0})));   // grey input
}

TEST(DirectWeightGradient, TheSameBitsAtAnyThreadCount) {
  SKIP_WITHOUT_AVX512();
  const Conv2dShape g = shape({3, 64, 40, 40, 16, 3, 3, 1, 0, 0, 0, 0});  // 36 blocks, three chunks of one image
  const Tensor x = test::random_tensor(Shape{g.n, g.h, g.w, g.c}, 3, 0.0f, 2.0f);
  const Tensor dy = test::random_tensor(Shape{g.n, g.p, g.q, g.k}, 4);
  std::vector<float> dw1(size_t(g.k * g.c * 9)), db1(size_t(g.k)), scratch;
  cpu::conv2d_direct_weight_gradient(g, x.f32(), dy.f32(), dw1.data(), db1.data(), scratch);
  // 1 thread; 5 and 7 split the 36 blocks unevenly; 40 leaves threads without blocks.
  const int threads = num_threads();
  for (const int t : {1, 5, 7, 40}) {
    set_num_threads(t);
    std::vector<float> dw2(dw1.size(), std::nanf("")), db2(db1.size(), std::nanf(""));
    std::fill(scratch.begin(), scratch.end(), 1e30f);  // no earlier run's sums
    cpu::conv2d_direct_weight_gradient(g, x.f32(), dy.f32(), dw2.data(), db2.data(), scratch);
    EXPECT_EQ(dw1, dw2) << t << " threads";
    EXPECT_EQ(db1, db2) << t << " threads";
  }
  set_num_threads(threads);
}

// Through conv2d_backward (the layer's CPU path), with the ReLU's mask applied to dy first.
TEST(DirectWeightGradient, IsWhatConv2dBackwardUsesForConv2d2) {
  SKIP_WITHOUT_AVX512();
  Conv2dShape g = shape({5, 64, 5, 5, 64, 3, 3, 1, 0, 0, 0, 0});
  g.relu = true;
  const test::Conv2dBackwardCase cs = test::conv2d_backward_case(g, 5);
  ASSERT_GT(cs.masked_out, g.n * g.p * g.q * g.k / 10);  // the mask matters in this case
  const Reference ref = direct(g, cs.x.f32(), cs.masked_dy.data());
  EXPECT_EQ(outside_tolerance(cs.dw.f32(), ref), 0);
  for (int64_t k = 0; k < g.k; ++k)
    EXPECT_NEAR(cs.db.f32()[k], ref.db[size_t(k)], 1e-6 * (std::fabs(ref.db[size_t(k)]) + 1));
  const std::string info = cpu::conv2d_kernel_info(g);
  EXPECT_NE(info.find("bwd-weights ember direct"), std::string::npos) << info;
}

}  // namespace
}  // namespace ember
