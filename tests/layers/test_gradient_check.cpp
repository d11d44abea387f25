// The installed gradient checker (layers/gradient_check.h): it passes the built-ins and catches a
// wrong backward, naming where.
#include <gtest/gtest.h>

#include "test_util.h"

namespace ember {
namespace {

// y = gamma * x with a deliberately wrong input gradient (2 gamma dy) when `broken`.
class Scale : public Layer {
 public:
  explicit Scale(bool broken) : broken_(broken) {}
  std::string type() const override { return "Scale"; }
  Shape build(const Shape& s) override { return s; }
  std::vector<ParamSpec> param_specs() const override { return {{"gamma", Shape{1}, ParamSpec::Init::Ones, 0, 0}}; }

 protected:
  const Tensor& do_forward(const Tensor& x, bool) override {
    x_ = x;
    ensure(y_, x.shape(), DType::F32, Device::cpu());
    for (int64_t i = 0; i < x.numel(); ++i) y_.f32()[i] = params_[0].f32()[0] * x.f32()[i];
    return y_;
  }
  const Tensor& do_backward(const Tensor& dy) override {
    ensure(dx_, dy.shape(), DType::F32, Device::cpu());
    double dg = 0;
    for (int64_t i = 0; i < dy.numel(); ++i) {
      dg += double(dy.f32()[i]) * x_.f32()[i];
      dx_.f32()[i] = (broken_ ? 2.0f : 1.0f) * params_[0].f32()[0] * dy.f32()[i];
    }
    grads_[0].f32()[0] = static_cast<float>(dg);
    return dx_;
  }

 private:
  bool broken_;
  Tensor x_, y_, dx_;
};

// Mean squared error whose backward is half what it should be.
class HalfGradientMse : public losses::MeanSquaredError {
 public:
  std::unique_ptr<Loss> clone() const override { return std::make_unique<HalfGradientMse>(); }
  const Tensor& backward(int64_t mean_rows) override {
    half_ = losses::MeanSquaredError::backward(mean_rows).clone();
    for (int64_t i = 0; i < half_.numel(); ++i) half_.f32()[i] *= 0.5f;
    return half_;
  }

 private:
  Tensor half_;
};

// ... and one whose backward forgot to write anything but zeros.
class ZeroGradientMse : public losses::MeanSquaredError {
 public:
  std::unique_ptr<Loss> clone() const override { return std::make_unique<ZeroGradientMse>(); }
  const Tensor& backward(int64_t mean_rows) override {
    zero_ = losses::MeanSquaredError::backward(mean_rows).clone();
    zero_.fill(0.0f);
    return zero_;
  }

 private:
  Tensor zero_;
};

TEST(CheckGradients, ALossOfManyOutputsIsJudgedAtItsOwnScale) {
  // 800 outputs: each element's gradient is ~1e-3, below any absolute tolerance; judged against
  // the largest element, a factor of 2 is still plain.
  const Tensor z = test::random_tensor(Shape{8, 100}, 3), t = test::random_tensor(Shape{8, 100}, 4);
  losses::MeanSquaredError right;
  const GradientCheckReport ok = check_gradients(right, z, t);
  EXPECT_TRUE(ok.passed) << ok.summary();
  HalfGradientMse wrong;
  const GradientCheckReport bad = check_gradients(wrong, z, t);
  EXPECT_FALSE(bad.passed) << bad.summary();
  ZeroGradientMse zero;
  const GradientCheckReport none = check_gradients(zero, z, t);
  EXPECT_FALSE(none.passed) << none.summary();
}

TEST(CheckGradients, PassesTheBuiltInsAndCatchesAWrongBackward) {
  Dense dense(3, Activation::None);
  const GradientCheckReport d = check_gradients(dense, Shape{4});
  EXPECT_TRUE(d.passed) << d.summary();
  EXPECT_EQ(d.checked, 2 * 4 + 4 * 3 + 3);  // the input, the kernel and the bias
  Conv2D conv(2, Size2{3, 3}, Activation::None);
  EXPECT_TRUE(check_gradients(conv, Shape{1, 5, 5}).passed);
  Scale good(false);
  EXPECT_TRUE(check_gradients(good, Shape{3}).passed);

  Scale bad(true);
  const GradientCheckReport b = check_gradients(bad, Shape{3});
  EXPECT_FALSE(b.passed);
  EXPECT_NE(b.worst.find("Scale input"), std::string::npos) << b.summary();
  EXPECT_GT(b.max_error, 10 * GradientCheckOptions{}.tolerance);  // twice the numeric: off by about |numeric|

  losses::Huber huber(0.5f);
  const GradientCheckReport h =
      check_gradients(huber, test::random_tensor(Shape{4, 3}, 1, -2.0f, 2.0f),
                      test::random_tensor(Shape{4, 3}, 2, -2.0f, 2.0f), GradientCheckOptions{.step = 1e-3});
  EXPECT_TRUE(h.passed) << h.summary();
}

}  // namespace
}  // namespace ember
