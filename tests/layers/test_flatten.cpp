// Flatten: the public NCHW order whatever the input layout.
#include <gtest/gtest.h>

#include "test_util.h"

namespace ember {
namespace {

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
