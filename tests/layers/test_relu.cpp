// ReLU: forward, gradients, the input layout kept.
#include <gtest/gtest.h>

#include "test_util.h"

namespace ember {
namespace {

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

}  // namespace
}  // namespace ember
