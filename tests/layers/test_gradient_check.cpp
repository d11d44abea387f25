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
  const GradientCheckReport h = check_gradients(huber, test::random_tensor(Shape{4, 3}, 1, -2.0f, 2.0f),
                                                test::random_tensor(Shape{4, 3}, 2, -2.0f, 2.0f),
                                                GradientCheckOptions{.step = 1e-3});
  EXPECT_TRUE(h.passed) << h.summary();
}

}  // namespace
}  // namespace ember
