// Dense, ReLU and Flatten: forward values, gradients, layouts, bad shapes.
#include <gtest/gtest.h>

#include "test_util.h"

namespace ember {
namespace {

TEST(Dense, ForwardMatchesNaive) {
  Dense dense(5, Activation::ReLU);
  test::build_standalone(dense, Shape{7}, 1);
  const Tensor x = test::random_tensor(Shape{3, 7}, 2);
  const std::vector<float> y = dense.forward(x, false).to_vector();
  const float *w = dense.params()[0].f32(), *b = dense.params()[1].f32(), *xp = x.f32();
  for (int i = 0; i < 3; ++i)
    for (int o = 0; o < 5; ++o) {
      double acc = b[o];
      for (int k = 0; k < 7; ++k) acc += double(xp[i * 7 + k]) * w[o * 7 + k];  // W is (out, in)
      // sgemm blocks the 7-term sum differently; 1e-5 is ~100 ulps of O(1) values.
      EXPECT_NEAR(y[static_cast<size_t>(i * 5 + o)], std::max(acc, 0.0), 1e-5);
    }
}

TEST(Dense, Gradients) {
  Dense dense(4);
  test::build_standalone(dense, Shape{6}, 3);
  test::check_layer_gradients(dense, test::random_tensor(Shape{3, 6}, 4), 5);
}

TEST(Dense, GradientsWithRelu) {
  Dense dense(4, Activation::ReLU);
  test::build_standalone(dense, Shape{6}, 6);
  test::check_layer_gradients(dense, test::random_tensor(Shape{3, 6}, 7), 8);
}

TEST(Dense, BackwardLeavesCallersGradientIntact) {
  Dense dense(3, Activation::ReLU);
  test::build_standalone(dense, Shape{4}, 1);
  dense.forward(test::random_tensor(Shape{2, 4}, 2), true);
  const Tensor dy = test::random_tensor(Shape{2, 3}, 3);
  const std::vector<float> before = dy.to_vector();
  dense.backward(dy);
  EXPECT_EQ(dy.to_vector(), before);
}

TEST(Dense, RejectsBadShapes) {
  Dense dense(4);
  EXPECT_THROW(dense.build(Shape{2, 3, 3}), ShapeError);
  EXPECT_THROW(Dense(0), ArgumentError);
  test::build_standalone(dense, Shape{6}, 1);
  EXPECT_THROW(dense.forward(Tensor::zeros(Shape{2, 5}), false), ShapeError);
}

TEST(ReLU, ForwardAndGradients) {
  ReLU relu;
  test::build_standalone(relu, Shape{2, 3, 3}, 1);
  const Tensor x = Tensor::from_vector(Shape{1, 4}, std::vector<float>{-1.0f, 0.5f, 0.0f, 2.0f});
  ReLU flat;
  test::build_standalone(flat, Shape{4}, 1);
  EXPECT_EQ(flat.forward(x, false).to_vector(), (std::vector<float>{0.0f, 0.5f, 0.0f, 2.0f}));
  test::check_layer_gradients(relu, test::random_tensor(Shape{2, 2, 3, 3}, 2), 3);
}

TEST(ReLU, KeepsTheInputLayout) {
  ReLU relu;
  test::build_standalone(relu, Shape{3, 2, 2}, 1);
  const Tensor x = test::random_tensor(Shape{2, 3, 2, 2}, 4).to_layout(Layout::NHWC);
  const Tensor& y = relu.forward(x, false);
  EXPECT_EQ(y.layout(), Layout::NHWC);
  std::vector<float> want = x.to_vector();
  for (float& v : want) v = std::max(v, 0.0f);
  EXPECT_EQ(y.to_vector(), want);
}

TEST(Flatten, UsesNchwOrderWhateverTheInputLayout) {
  Flatten flatten;
  EXPECT_EQ(test::build_standalone(flatten, Shape{3, 2, 2}, 1), Shape{12});
  const Tensor x = test::random_tensor(Shape{2, 3, 2, 2}, 5);
  const std::vector<float> a = flatten.forward(x, false).to_vector();
  EXPECT_EQ(a, x.to_vector());  // row-major input: the same values in the same order
  const std::vector<float> b = flatten.forward(x.to_layout(Layout::NHWC), false).to_vector();
  EXPECT_EQ(a, b);
  test::check_layer_gradients(flatten, x, 6);
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

TEST(Matmul, MatchesNaiveAndChecksShapes) {
  const Tensor a = test::random_tensor(Shape{5, 7}, 1), b = test::random_tensor(Shape{7, 3}, 2);
  const Tensor c = matmul(a, b);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) {
      double acc = 0;
      for (int k = 0; k < 7; ++k) acc += double(a.f32()[i * 7 + k]) * b.f32()[k * 3 + j];
      EXPECT_NEAR(c.f32()[i * 3 + j], acc, 1e-5);  // 7-term float sums, reordered by sgemm
    }
  EXPECT_THROW(matmul(a, a), ShapeError);
  Tensor wrong = Tensor::zeros(Shape{5, 4});
  EXPECT_THROW(matmul(a, b, wrong), ShapeError);
}

}  // namespace
}  // namespace ember
