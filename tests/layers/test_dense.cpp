// Dense: forward values against a naive loop, gradients, bad shapes.
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

}  // namespace
}  // namespace ember
