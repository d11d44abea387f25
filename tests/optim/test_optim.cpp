// Adam and SGD against hand-computed steps.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

namespace ember {
namespace {

TEST(Adam, MatchesHandComputedSteps) {
  AdamOptions o;  // Keras defaults: lr 1e-3, b1 0.9, b2 0.999, eps 1e-7
  Adam adam(o);
  Tensor p = Tensor::from_vector(Shape{2}, std::vector<float>{1.0f, -2.0f});
  const std::vector<std::vector<float>> grads{{0.5f, -1.0f}, {0.1f, 3.0f}, {-0.2f, 0.0f}};
  double m[2] = {0, 0}, v[2] = {0, 0}, ref[2] = {1.0, -2.0};
  for (size_t t = 1; t <= grads.size(); ++t) {
    adam.step(p, Tensor::from_vector(Shape{2}, grads[t - 1]));
    const double lr_t = 1e-3 * std::sqrt(1 - std::pow(0.999, double(t))) / (1 - std::pow(0.9, double(t)));
    for (int i = 0; i < 2; ++i) {
      const double g = grads[t - 1][static_cast<size_t>(i)];
      m[i] = 0.9 * m[i] + 0.1 * g;
      v[i] = 0.999 * v[i] + 0.001 * g * g;
      ref[i] -= lr_t * m[i] / (std::sqrt(v[i]) + 1e-7);
    }
    // float32 parameters near 1 carry ~6e-8 of rounding per step.
    EXPECT_NEAR(p.f32()[0], ref[0], 1e-6) << "step " << t;
    EXPECT_NEAR(p.f32()[1], ref[1], 1e-6) << "step " << t;
  }
  EXPECT_EQ(adam.iterations(), 3);
}

TEST(Adam, FirstStepMovesByTheLearningRateWhateverTheGradientScale) {
  // Step 1: m = 0.1 g, v = 0.001 g^2, lr_t = lr sqrt(0.001) / 0.1, so |dp| = lr (up to eps).
  Adam adam;
  Tensor p = Tensor::from_vector(Shape{3}, std::vector<float>{0.0f, 0.0f, 0.0f});
  adam.step(p, Tensor::from_vector(Shape{3}, std::vector<float>{1e-3f, -50.0f, 0.0f}));
  // For the tiny gradient eps is not negligible: sqrt(v) = sqrt(0.001) * 1e-3 = 3.16e-5.
  EXPECT_NEAR(p.f32()[0], -1e-3 / (1 + 1e-7 / (std::sqrt(1e-3) * 1e-3)), 1e-8);
  EXPECT_NEAR(p.f32()[1], 1e-3, 1e-8);
  EXPECT_EQ(p.f32()[2], 0.0f);
}

TEST(Adam, RejectsBadOptionsAndMismatchedBuffers) {
  EXPECT_THROW(Adam(AdamOptions{.learning_rate = -1.0f}), ArgumentError);
  EXPECT_THROW(Adam(AdamOptions{.beta1 = 1.0f}), ArgumentError);
  Adam adam;
  Tensor p = Tensor::zeros(Shape{3});
  EXPECT_THROW(adam.step(p, Tensor::zeros(Shape{4})), ShapeError);
}

TEST(SGD, MomentumMatchesKerasRule) {
  SGD sgd(SgdOptions{.learning_rate = 0.1f, .momentum = 0.9f});
  Tensor p = Tensor::from_vector(Shape{1}, std::vector<float>{1.0f});
  sgd.step(p, Tensor::from_vector(Shape{1}, std::vector<float>{1.0f}));  // v = -0.1, p = 0.9
  EXPECT_FLOAT_EQ(p.f32()[0], 0.9f);
  sgd.step(p, Tensor::from_vector(Shape{1}, std::vector<float>{1.0f}));  // v = -0.09 - 0.1, p = 0.71
  EXPECT_NEAR(p.f32()[0], 0.71f, 1e-6);
}

TEST(SGD, PlainStepWithoutMomentum) {
  SGD sgd(SgdOptions{.learning_rate = 0.5f});
  Tensor p = Tensor::from_vector(Shape{2}, std::vector<float>{1.0f, 2.0f});
  sgd.step(p, Tensor::from_vector(Shape{2}, std::vector<float>{2.0f, -2.0f}));
  EXPECT_EQ(p.to_vector(), (std::vector<float>{0.0f, 3.0f}));
}

// What a captured CUDA graph of a step is keyed on (fit captures again when it changes): every
// optimizer object has its own id (a new one at a freed address included), and replacing its
// state from outside changes its version; steps themselves do not.
TEST(Optimizer, IdsAreUniqueAndOutsideStateChangesBumpTheVersion) {
  Adam a, b;
  EXPECT_NE(a.id(), b.id());
  const uint64_t old = a.id();
  {
    Adam c;
    EXPECT_GT(c.id(), old);
  }
  Tensor p = Tensor::zeros(Shape{4}), g = Tensor::zeros(Shape{4});
  g.fill(1.0f);
  const int64_t v0 = a.state_version();
  a.step(p, g);
  a.count_step();
  EXPECT_EQ(a.iterations(), 2);
  EXPECT_EQ(a.state_version(), v0);
  a.set_iterations(10);
  EXPECT_EQ(a.state_version(), v0 + 1);
  a.set_state("m", Tensor::zeros(Shape{4}));
  EXPECT_EQ(a.state_version(), v0 + 2);
}

}  // namespace
}  // namespace ember
