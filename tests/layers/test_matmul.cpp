// matmul: against a naive loop; shape checks.
#include <gtest/gtest.h>

#include "test_util.h"

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
