// The Winograd F(4x4, 3x3) weight gradient (layers/cpu/conv2d_winograd.h) against a direct sum in
// double, on shapes that cover partial tiles at the right and bottom edges, padding, chunks of
// several images and a last chunk with fewer; which shapes it takes; same bits run to run and at
// any thread count, for the AVX-512 and the AVX2 sums.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

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

struct Reference {
  std::vector<double> dw, db;              // in double: the reference's own rounding is not charged to the kernel
  std::vector<double> dw_scale, db_scale;  // per value, the sum of |terms|: what rounding is relative to
  double scale = 0;                        // the largest dw_scale
};

// dw[k][c][r][s] = sum over n, p, q of dy[n][p][q][k] * x[n][p + r - pad][q + s - pad][c] (NHWC).
Reference direct(const Conv2dShape& g, const float* x, const float* dy) {
  Reference ref;
  ref.dw.resize(size_t(g.k * g.c * 9));
  ref.db.resize(size_t(g.k));
  ref.dw_scale.resize(ref.dw.size());
  ref.db_scale.resize(ref.db.size());
  for (int64_t k = 0; k < g.k; ++k) {
    double b = 0, babs = 0;
    for (int64_t i = 0; i < g.n * g.p * g.q; ++i) b += dy[i * g.k + k], babs += std::fabs(dy[i * g.k + k]);
    ref.db[size_t(k)] = b;
    ref.db_scale[size_t(k)] = babs;
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t r = 0; r < 3; ++r)
        for (int64_t s = 0; s < 3; ++s) {
          double sum = 0, abs = 0;
          for (int64_t n = 0; n < g.n; ++n)
            for (int64_t p = 0; p < g.p; ++p)
              for (int64_t q = 0; q < g.q; ++q) {
                const int64_t h = p + r - g.pad_top, w = q + s - g.pad_left;
                if (h < 0 || h >= g.h || w < 0 || w >= g.w) continue;
                const double t =
                    double(dy[((n * g.p + p) * g.q + q) * g.k + k]) * x[((n * g.h + h) * g.w + w) * g.c + c];
                sum += t, abs += std::fabs(t);
              }
          ref.dw[size_t(((k * g.c + c) * 3 + r) * 3 + s)] = sum;
          ref.dw_scale[size_t(((k * g.c + c) * 3 + r) * 3 + s)] = abs;
          ref.scale = std::max(ref.scale, abs);
        }
  }
  return ref;
}

struct Case {
  int64_t n, c, h, w, k, pad;
};

class WinogradWeightGradient : public ::testing::TestWithParam<Case> {};

// The transforms scale terms by up to 8 (A) and 5 (B^T) per axis before the 36 products and back
// by 1/24 (G^T) after, so each product carries a few float roundings of a value up to ~1e2 times
// its own size, and the products are summed in float per chunk, in double across chunks. Measured
// on the shapes below (both sums): 2.1e-7..3.7e-7 of the largest sum of |products|, and per value
// 2.3e-7..6.7e-7 of its own sum of |products| (a value whose products nearly cancel is held to its
// own scale too). Allowed: 1e-6 and 2e-6, about 3x. A coefficient of G off by 0.1% gives ~1e-3.
constexpr double kTolerance = 1e-6, kPerValueTolerance = 2e-6;
// db is each tile's 16 dy summed in float (the transform's sum point), the tiles in double: a few
// float roundings of partial sums, measured 2.9e-9..1.1e-8 of sum |dy|; allowed 3e-8. (It was
// 1e-5 x n x p x q in absolute terms, ~0.01, which could not see a 20% error in a db of ~0.05.)
constexpr double kDbTolerance = 3e-8;

// The worst |got - ref| / scale over the values.
double worst_scaled(const std::vector<float>& got, const std::vector<double>& ref, const std::vector<double>& scale) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::fabs(double(got[i]) - ref[i]) / (scale[i] + 1e-30));
  return worst;
}

TEST_P(WinogradWeightGradient, MatchesTheDirectSum) {
  const Case cs = GetParam();
  const Conv2dShape g = shape(cs.n, cs.c, cs.h, cs.w, cs.k, cs.pad);
  ASSERT_TRUE(cpu::conv2d_winograd_weight_gradient_fits(g)) << g.str();
  const Tensor x = test::random_tensor(Shape{g.n, g.h, g.w, g.c}, 1, 0.0f, 2.0f);  // after a ReLU
  const Tensor dy = test::random_tensor(Shape{g.n, g.p, g.q, g.k}, 2);
  const Reference ref = direct(g, x.f32(), dy.f32());
  for (const bool avx512 : {true, false}) {  // the AVX-512 sums (where the CPU has them), the AVX2 ones
    std::vector<float> dw(size_t(g.k * g.c * 9)), db(size_t(g.k));
    cpu::WinogradScratch scratch;
    cpu::conv2d_winograd_weight_gradient(g, x.f32(), dy.f32(), dw.data(), db.data(), scratch, avx512);
    double err = 0;
    for (size_t i = 0; i < dw.size(); ++i) err = std::max(err, std::fabs(double(dw[i]) - ref.dw[i]));
    EXPECT_LT(err / ref.scale, kTolerance) << g.str() << (avx512 ? "" : " (AVX2)");
    const double per_value = worst_scaled(dw, ref.dw, ref.dw_scale), db_err = worst_scaled(db, ref.db, ref.db_scale);
    std::printf("%s%s: dw %.3g of the largest scale, %.3g of its own; db %.3g\n", g.str().c_str(),
                avx512 ? "" : " (AVX2)", err / ref.scale, per_value, db_err);
    EXPECT_LT(per_value, kPerValueTolerance) << g.str();
    EXPECT_LT(db_err, kDbTolerance) << g.str();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, WinogradWeightGradient,
    ::testing::Values(Case{9, 32, 13, 13, 64, 0},   // the reference CNN's conv2d_1: 11x11 outputs in 3x3 tiles of
                                                    // 4 (the last row and column partial), 2 chunks: 8 images and 1
                      Case{2, 16, 8, 8, 8, 1},      // SAME padding: tiles read zeros outside the image
                      Case{1, 16, 38, 41, 16, 0},   // one image of 9x10 tiles (more than a chunk's 72)
                      Case{5, 48, 6, 7, 24, 1},     // outputs 6x7: two tiles each way, the second partial
                      Case{3, 64, 5, 12, 64, 1}));  // two 32-channel blocks for the AVX-512 sums

TEST(WinogradWeightGradient, TakesOnly3x3Stride1WithVectorChannelsAndTiles) {
  EXPECT_TRUE(cpu::conv2d_winograd_weight_gradient_fits(shape(1, 32, 13, 13, 64, 0)));
  Conv2dShape g = shape(1, 32, 13, 13, 64, 0);
  g.stride_h = 2;
  EXPECT_FALSE(cpu::conv2d_winograd_weight_gradient_fits(g));
  g = shape(1, 32, 13, 13, 64, 0);
  g.r = g.s = 5, g.p = g.q = 9;
  EXPECT_FALSE(cpu::conv2d_winograd_weight_gradient_fits(g));
  EXPECT_FALSE(cpu::conv2d_winograd_weight_gradient_fits(shape(1, 8, 13, 13, 64, 0)));  // C not a multiple of 16
  EXPECT_FALSE(cpu::conv2d_winograd_weight_gradient_fits(shape(1, 32, 13, 13, 4, 0)));  // K not a multiple of 8
  EXPECT_FALSE(
      cpu::conv2d_winograd_weight_gradient_fits(shape(1, 64, 5, 5, 64, 0)));  // 3x3 outputs: one tile, 7/16 empty
}

TEST(WinogradWeightGradient, TheSameBitsEveryRunAndAtAnyThreadCount) {
  // 3 groups of the batch (16, 16 and 8 images; chunks of 8): 1 and 2 threads take whole groups (2
  // threads: two of them, the third split by points), 5, 7 and 40 split every group by points.
  const Conv2dShape g = shape(40, 32, 13, 13, 64, 0);
  const Tensor x = test::random_tensor(Shape{g.n, g.h, g.w, g.c}, 3, 0.0f, 2.0f);
  const Tensor dy = test::random_tensor(Shape{g.n, g.p, g.q, g.k}, 4);
  std::vector<float> dw1(size_t(g.k * g.c * 9)), db1(size_t(g.k)), dw2 = dw1, db2 = db1;
  cpu::WinogradScratch scratch;
  cpu::conv2d_winograd_weight_gradient(g, x.f32(), dy.f32(), dw1.data(), db1.data(), scratch);
  cpu::WinogradScratch other_scratch;  // stale contents must not leak in
  other_scratch.tiles.assign(scratch.tiles.size(), 1e30f);
  other_scratch.sums.assign(scratch.sums.size(), 1e300);
  cpu::conv2d_winograd_weight_gradient(g, x.f32(), dy.f32(), dw2.data(), db2.data(), other_scratch);
  EXPECT_EQ(dw1, dw2);
  EXPECT_EQ(db1, db2);
  // At other thread counts too: each point's sums run over the tiles in order whoever runs them.
  // 1 thread takes every group whole; 5, 7 and 40 split each group's 36 points (5 and 7 split
  // rows of 6 points between threads, 40 leaves threads without points).
  const int threads = num_threads();
  for (const int t : {1, 5, 7, 40}) {
    set_num_threads(t);
    std::fill(dw2.begin(), dw2.end(), std::nanf(""));
    std::fill(db2.begin(), db2.end(), std::nanf(""));
    std::fill(other_scratch.tiles.begin(), other_scratch.tiles.end(), 1e30f);  // no earlier run's tiles
    std::fill(other_scratch.sums.begin(), other_scratch.sums.end(), 1e300);
    cpu::conv2d_winograd_weight_gradient(g, x.f32(), dy.f32(), dw2.data(), db2.data(), other_scratch);
    EXPECT_EQ(dw1, dw2) << t << " threads";
    EXPECT_EQ(db1, db2) << t << " threads";
  }
  // The AVX2 sums too (the same on a CPU without AVX-512), at 1 thread and 7.
  std::vector<float> dw3(dw1.size()), db3(db1.size());
  set_num_threads(1);
  cpu::conv2d_winograd_weight_gradient(g, x.f32(), dy.f32(), dw3.data(), db3.data(), scratch, false);
  set_num_threads(7);
  std::fill(other_scratch.tiles.begin(), other_scratch.tiles.end(), 1e30f);
  std::fill(other_scratch.sums.begin(), other_scratch.sums.end(), 1e300);
  cpu::conv2d_winograd_weight_gradient(g, x.f32(), dy.f32(), dw2.data(), db2.data(), other_scratch, false);
  EXPECT_EQ(dw3, dw2) << "AVX2 sums";
  EXPECT_EQ(db3, db2) << "AVX2 sums";
  set_num_threads(threads);
}

// Replicas' weight gradients of their shares of a batch, added in the all-reduce's pairwise tree,
// must be the whole batch's bit for bit (tests/apps: TrainMnistReplicas); any rounding difference
// becomes, over enough Adam steps, a flipped ReLU or max-pool decision. The batch's groups of 16
// images are each summed on their own and added as that tree (core/pairwise_sum.h): 64 images
// against 4 shares of 16 and 2 of 32, 48 against 3 of 16 ((a + b) + c). Before the groups (chunks
// summed across in double, one rounding to float) 2 shares of a 40-image batch were 2.0u apart.
// Where the CPU lacks AVX-512 both passes run the AVX2 sums.
TEST(WinogradWeightGradient, ABatchIsItsAlignedSharesAddedInThePairwiseTreeBitForBit) {
  const Conv2dShape whole = shape(64, 32, 13, 13, 64, 0);
  const Tensor x = test::random_tensor(Shape{whole.n, whole.h, whole.w, whole.c}, 9, 0.0f, 2.0f);
  const Tensor dy = test::random_tensor(Shape{whole.n, whole.p, whole.q, whole.k}, 10);
  const int64_t x_image = whole.h * whole.w * whole.c, dy_image = whole.p * whole.q * whole.k;
  const int64_t dw_size = whole.k * whole.c * 9;
  for (const bool avx512 : {true, false}) {
    SCOPED_TRACE(avx512 ? "AVX-512 where the CPU has it" : "AVX2");
    cpu::WinogradScratch scratch;
    // dw and db of the images [first, first + n), as one row of dw_size + K values.
    const auto gradient = [&](int64_t first, int64_t n) {
      const Conv2dShape g = shape(n, 32, 13, 13, 64, 0);
      std::vector<float> out(size_t(dw_size + whole.k));
      cpu::conv2d_winograd_weight_gradient(g, x.f32() + first * x_image, dy.f32() + first * dy_image, out.data(),
                                           out.data() + dw_size, scratch, avx512);
      return out;
    };
    const std::vector<float> all = gradient(0, 64);
    double largest = 0;  // the sums are not trivially equal: 64 * 121 products of |x| ~ 1, |dy| ~ 0.5
    for (const float v : all) largest = std::max(largest, double(std::fabs(v)));
    ASSERT_GT(largest, 10.0);
    EXPECT_EQ(all, test::pairwise_tree_of({gradient(0, 16), gradient(16, 16), gradient(32, 16), gradient(48, 16)}))
        << "4 x 16";
    EXPECT_EQ(all, test::pairwise_tree_of({gradient(0, 32), gradient(32, 32)})) << "2 x 32";
    EXPECT_EQ(gradient(0, 48), test::pairwise_tree_of({gradient(0, 16), gradient(16, 16), gradient(32, 16)}))
        << "3 x 16";
  }
}

// Through conv2d_backward (the layer's CPU path), with the ReLU's mask applied to dy first.
TEST(WinogradWeightGradient, IsWhatConv2dBackwardUsesForItsShapes) {
  Conv2dShape g = shape(3, 32, 13, 13, 64, 0);
  g.relu = true;
  const test::Conv2dBackwardCase cs = test::conv2d_backward_case(g, 5);
  ASSERT_GT(cs.masked_out, g.n * g.p * g.q * g.k / 10);  // the mask matters in this case
  const Reference ref = direct(g, cs.x.f32(), cs.masked_dy.data());
  double err = 0;
  for (int64_t i = 0; i < cs.dw.numel(); ++i)
    err = std::max(err, std::fabs(double(cs.dw.f32()[i]) - ref.dw[size_t(i)]));
  EXPECT_LT(err / ref.scale, kTolerance);
  EXPECT_LT(worst_scaled(std::vector<float>(cs.db.f32(), cs.db.f32() + g.k), ref.db, ref.db_scale), kDbTolerance);
  const std::string info = cpu::conv2d_kernel_info(g);
  EXPECT_NE(info.find("bwd-weights ember winograd"), std::string::npos) << info;
}

}  // namespace
}  // namespace ember
