// MaxPool2D: forward against a naive loop (2x2/2 and general windows), gradients, bad shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>

#include "test_util.h"

namespace ember {
namespace {

std::vector<float> naive_pool(const Tensor& x, int64_t r, int64_t s, int64_t sh, int64_t sw, int64_t pt, int64_t pl,
                              int64_t p, int64_t q) {
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  std::vector<float> y;
  const float* xp = x.f32();
  for (int64_t in = 0; in < n; ++in)
    for (int64_t ic = 0; ic < c; ++ic)
      for (int64_t ip = 0; ip < p; ++ip)
        for (int64_t iq = 0; iq < q; ++iq) {
          float m = -std::numeric_limits<float>::infinity();
          for (int64_t ir = 0; ir < r; ++ir)
            for (int64_t is = 0; is < s; ++is) {
              const int64_t ih = ip * sh - pt + ir, iw = iq * sw - pl + is;
              if (ih >= 0 && ih < h && iw >= 0 && iw < w) m = std::max(m, xp[((in * c + ic) * h + ih) * w + iw]);
            }
          y.push_back(m);
        }
  return y;
}

struct PoolCase {
  int64_t n, c, h, w, r, s, stride;
  Padding padding;
};

class MaxPoolForward : public ::testing::TestWithParam<PoolCase> {};

TEST_P(MaxPoolForward, MatchesNaiveLoop) {
  const PoolCase pc = GetParam();
  MaxPool2D pool({pc.r, pc.s}, Size2{pc.stride, pc.stride}, pc.padding);
  const Shape out = test::build_standalone(pool, Shape{pc.c, pc.h, pc.w}, 1);
  const Tensor x = test::random_tensor(Shape{pc.n, pc.c, pc.h, pc.w}, 3);
  const Tensor& y = pool.forward(x, false);
  ASSERT_EQ(y.shape(), out.with_batch(pc.n));
  const AxisGeometry gh = axis_geometry(pc.h, pc.r, pc.stride, pc.padding);
  const AxisGeometry gw = axis_geometry(pc.w, pc.s, pc.stride, pc.padding);
  // A max selects an input exactly: the result must be bit-identical.
  EXPECT_EQ(y.to_vector(),
            naive_pool(x, pc.r, pc.s, pc.stride, pc.stride, gh.pad_before, gw.pad_before, gh.out, gw.out));
}

INSTANTIATE_TEST_SUITE_P(Shapes, MaxPoolForward,
                         ::testing::Values(PoolCase{2, 3, 8, 8, 2, 2, 2, Padding::Valid},  // the classic
                                           PoolCase{2, 4, 7, 7, 2, 2, 2, Padding::Valid},  // odd input: drops an edge
                                           PoolCase{1, 5, 9, 9, 3, 3, 2, Padding::Valid},  // overlapping windows
                                           PoolCase{2, 3, 7, 5, 3, 3, 2, Padding::Same},   // padded edges
                                           PoolCase{1, 17, 6, 6, 3, 3, 3, Padding::Valid}  // C not a vector multiple
                                           ));

TEST(MaxPool2D, Gradients2x2) {
  MaxPool2D pool({2, 2});
  test::build_standalone(pool, Shape{3, 6, 6}, 1);
  test::check_layer_gradients(pool, test::random_tensor(Shape{2, 3, 6, 6}, 2), 3);
}

TEST(MaxPool2D, GradientsOverlappingWindows) {
  MaxPool2D pool({3, 3}, Size2{2, 2}, Padding::Same);
  test::build_standalone(pool, Shape{2, 7, 7}, 1);
  test::check_layer_gradients(pool, test::random_tensor(Shape{2, 2, 7, 7}, 4), 5);
}

TEST(MaxPool2D, BackwardRoutesToTheMaximum) {
  MaxPool2D pool({2, 2});
  test::build_standalone(pool, Shape{1, 2, 2}, 1);
  const Tensor x = Tensor::from_vector(Shape{1, 1, 2, 2}, std::vector<float>{0.1f, 0.9f, -0.3f, 0.5f});
  pool.forward(x, true);
  const Tensor& dx = pool.backward(Tensor::from_vector(Shape{1, 1, 1, 1}, std::vector<float>{2.0f}));
  EXPECT_EQ(dx.to_vector(), (std::vector<float>{0.0f, 2.0f, 0.0f, 0.0f}));
}

// SAME with an even window and its stride on an odd input (7x5 -> 4x3): the last window row and
// column hang over the bottom/right padding. The backward routes each gradient to its window's
// first maximum inside the input, and writes nothing past it (the sanitizer build checks that;
// it once wrote the padding row into the next image).
TEST(MaxPool2D, SameWindowsOverAnOddInputRouteInsideTheInput) {
  MaxPool2D pool({2, 2}, Size2{2, 2}, Padding::Same);
  ASSERT_EQ(test::build_standalone(pool, Shape{3, 7, 5}, 1), (Shape{3, 4, 3}));
  const Tensor x = test::random_tensor(Shape{3, 3, 7, 5}, 6);
  const Tensor dy = test::random_tensor(Shape{3, 3, 4, 3}, 7);
  pool.forward(x, true);
  const std::vector<float> dx = pool.backward(dy).to_vector();
  std::vector<float> want(size_t(x.numel()), 0.0f);
  for (int64_t plane = 0; plane < 9; ++plane)
    for (int64_t p = 0; p < 4; ++p)
      for (int64_t q = 0; q < 3; ++q) {
        int64_t at = -1;
        for (int64_t h = 2 * p; h < std::min<int64_t>(2 * p + 2, 7); ++h)
          for (int64_t w = 2 * q; w < std::min<int64_t>(2 * q + 2, 5); ++w) {
            const int64_t i = (plane * 7 + h) * 5 + w;
            if (at < 0 || x.f32()[i] > x.f32()[at]) at = i;
          }
        want[size_t(at)] += dy.f32()[(plane * 4 + p) * 3 + q];  // one window per input: no sum to order
      }
  EXPECT_EQ(dx, want);
  test::check_layer_gradients(pool, x, 8);
}

TEST(MaxPool2D, RejectsBadShapes) {
  MaxPool2D pool({2, 2});
  EXPECT_THROW(pool.build(Shape{4}), ShapeError);
  EXPECT_THROW(pool.build(Shape{1, 1, 1}), ShapeError);  // window larger than input
  EXPECT_THROW(MaxPool2D({0, 2}), ArgumentError);
  test::build_standalone(pool, Shape{1, 4, 4}, 1);
  EXPECT_THROW(pool.forward(Tensor::zeros(Shape{1, 1, 5, 4}), false), ShapeError);
}

}  // namespace
}  // namespace ember
