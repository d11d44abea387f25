// AvgPool2D and GlobalAvgPool2D: forward against a naive loop (padding not counted, as Keras),
// gradients by finite differences, shapes and bad arguments.
#include <gtest/gtest.h>

#include "test_util.h"

namespace ember {
namespace {

std::vector<double> naive_avg(const Tensor& x, int64_t r, int64_t s, int64_t stride, Padding padding) {
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), w = x.dim(3);
  const AxisGeometry gh = axis_geometry(h, r, stride, padding), gw = axis_geometry(w, s, stride, padding);
  const std::vector<float> v = x.to_vector();
  std::vector<double> y;
  for (int64_t in = 0; in < n; ++in)
    for (int64_t ic = 0; ic < c; ++ic)
      for (int64_t p = 0; p < gh.out; ++p)
        for (int64_t q = 0; q < gw.out; ++q) {
          double sum = 0;
          int count = 0;
          for (int64_t ir = 0; ir < r; ++ir)
            for (int64_t is = 0; is < s; ++is) {
              const int64_t ih = p * stride - gh.pad_before + ir, iw = q * stride - gw.pad_before + is;
              if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
              sum += v[((in * c + ic) * h + ih) * w + iw];
              ++count;
            }
          y.push_back(sum / count);
        }
  return y;
}

struct AvgCase {
  int64_t n, c, h, w, r, s, stride;
  Padding padding;
};

class AvgPoolForward : public ::testing::TestWithParam<AvgCase> {};

TEST_P(AvgPoolForward, MatchesNaiveLoop) {
  const AvgCase pc = GetParam();
  AvgPool2D pool({pc.r, pc.s}, Size2{pc.stride, pc.stride}, pc.padding);
  const Shape out = test::build_standalone(pool, Shape{pc.c, pc.h, pc.w}, 1);
  const Tensor x = test::random_tensor(Shape{pc.n, pc.c, pc.h, pc.w}, 3);
  const Tensor& y = pool.forward(x, false);
  ASSERT_EQ(y.shape(), out.with_batch(pc.n));
  const std::vector<float> got = y.to_vector();
  const std::vector<double> want = naive_avg(x, pc.r, pc.s, pc.stride, pc.padding);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
}

INSTANTIATE_TEST_SUITE_P(Shapes, AvgPoolForward,
                         ::testing::Values(AvgCase{2, 3, 8, 8, 2, 2, 2, Padding::Valid},
                                           AvgCase{1, 5, 9, 9, 3, 3, 2, Padding::Valid},  // overlapping
                                           AvgCase{2, 3, 7, 5, 3, 3, 2, Padding::Same},   // symmetric pads
                                           AvgCase{2, 4, 6, 6, 2, 2, 1, Padding::Same},   // one pad, after
                                           AvgCase{1, 17, 5, 5, 3, 3, 3, Padding::Same}));

TEST(AvgPool2D, GradientsMatchFiniteDifferences) {
  AvgPool2D pool({3, 3}, Size2{2, 2}, Padding::Same);
  test::build_standalone(pool, Shape{2, 5, 6}, 1);
  pool.set_needs_input_grad(true);
  test::check_layer_gradients(pool, test::random_tensor(Shape{2, 2, 5, 6}, 2), 3);
}

TEST(AvgPool2D, RejectsBadArguments) {
  EXPECT_THROW(AvgPool2D({0, 2}), ArgumentError);
  EXPECT_THROW(AvgPool2D({2, 2}, Size2{0, 1}), ArgumentError);
  AvgPool2D pool({5, 5});
  EXPECT_THROW(pool.build(Shape{1, 3, 3}), ShapeError);  // the window does not fit
}

TEST(GlobalAvgPool2D, AveragesEachChannel) {
  GlobalAvgPool2D pool;
  EXPECT_EQ(test::build_standalone(pool, Shape{3, 4, 5}, 1), Shape{3});
  const Tensor x = test::random_tensor(Shape{2, 3, 4, 5}, 2);
  const Tensor& y = pool.forward(x, false);
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.layout(), Layout::RowMajor);
  const std::vector<float> v = x.to_vector(), got = y.to_vector();
  for (int64_t i = 0; i < 6; ++i) {
    double sum = 0;
    for (int64_t j = 0; j < 20; ++j) sum += v[i * 20 + j];
    EXPECT_NEAR(got[i], sum / 20, 1e-6);
  }
  pool.set_needs_input_grad(true);
  test::check_layer_gradients(pool, test::random_tensor(Shape{2, 3, 4, 5}, 3), 4);
  EXPECT_THROW(GlobalAvgPool2D().build(Shape{7}), ShapeError);
}

TEST(GlobalAvgPool2D, TrainsInAModel) {
  Sequential m;
  m.add<Conv2D>(4, Size2{3, 3}, Activation::ReLU, Padding::Same);
  m.add<AvgPool2D>(Size2{2, 2});
  m.add<GlobalAvgPool2D>();
  m.add<Dense>(2);
  m.build(Shape{1, 6, 6}, 1);
  m.compile(std::make_unique<Adam>(AdamOptions{.learning_rate = 1e-2f}));
  const Tensor x = test::random_tensor(Shape{4, 1, 6, 6}, 2, 0.0f, 1.0f);
  Tensor labels = Tensor::zeros(Shape{4}, DType::I32, Device::cpu());
  const float first = m.train_step(x, labels);
  float last = first;
  for (int i = 0; i < 20; ++i) last = m.train_step(x, labels);
  EXPECT_LT(last, first * 0.5f);  // one class everywhere: the loss must fall
}

}  // namespace
}  // namespace ember
