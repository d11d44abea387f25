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

// y = (x - c)^2 element-wise: smooth, its curvature (2) as large as its slopes; or, when `kinked`,
// y = (x - c) * (x >= c ? 1 : below): a slope of 1 above c and `below` under it (-3 by default: a
// jump of 4).
class Bend : public Layer {
 public:
  Bend(float c, bool kinked, float below = -3.0f) : c_(c), below_(below), kinked_(kinked) {}
  std::string type() const override { return "Bend"; }
  Shape build(const Shape& s) override { return s; }

 protected:
  const Tensor& do_forward(const Tensor& x, bool) override {
    x_ = x;
    ensure(y_, x.shape(), DType::F32, Device::cpu());
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float e = x.f32()[i] - c_;
      y_.f32()[i] = kinked_ ? (e >= 0 ? e : below_ * e) : e * e;
    }
    return y_;
  }
  const Tensor& do_backward(const Tensor& dy) override {
    ensure(dx_, dy.shape(), DType::F32, Device::cpu());
    for (int64_t i = 0; i < dy.numel(); ++i) {
      const float e = x_.f32()[i] - c_;
      dx_.f32()[i] = dy.f32()[i] * (kinked_ ? (e >= 0 ? 1.0f : below_) : 2 * e);
    }
    return dx_;
  }

 private:
  float c_, below_;
  bool kinked_;
  Tensor x_, y_, dx_;
};

// y = (x (1 + b)) / (1 + b) in float, b one value per feature: the output does not depend on b,
// its gradient is exactly zero, and the central differences see only the forward's rounding.
class Cancel : public Layer {
 public:
  std::string type() const override { return "Cancel"; }
  Shape build(const Shape& s) override { return features_ = s; }
  std::vector<ParamSpec> param_specs() const override { return {{"b", features_, ParamSpec::Init::Zeros, 0, 0}}; }

 protected:
  const Tensor& do_forward(const Tensor& x, bool) override {
    ensure(y_, x.shape(), DType::F32, Device::cpu());
    const float* b = params_[0].f32();
    const int64_t n = features_.numel();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float s = 1.0f + b[i % n];
      y_.f32()[i] = (x.f32()[i] * s) / s;
    }
    return y_;
  }
  const Tensor& do_backward(const Tensor& dy) override {
    ensure(dx_, dy.shape(), DType::F32, Device::cpu());
    for (int64_t i = 0; i < dy.numel(); ++i) dx_.f32()[i] = dy.f32()[i];
    grads_[0].fill(0.0f);
    return dx_;
  }

 private:
  Shape features_;
  Tensor y_, dx_;
};

TEST(CheckGradients, AGradientThatIsZeroPasses) {
  // b's numeric gradient is the forward's rounding alone (about 2^-24 of the outputs over the
  // step): judged at the check's resolution, not at its own (noise) scale.
  Cancel cancel;
  const GradientCheckReport r = check_gradients(cancel, Shape{12}, {.batch = 16});  // noise in every b's outputs
  EXPECT_TRUE(r.passed) << r.summary();
}

// y = x / 20 (an average's scale), its input gradient dy / 20, or dy / 19 when `broken`.
class Shrink : public Layer {
 public:
  explicit Shrink(bool broken) : broken_(broken) {}
  std::string type() const override { return "Shrink"; }
  Shape build(const Shape& s) override { return s; }

 protected:
  const Tensor& do_forward(const Tensor& x, bool) override {
    ensure(y_, x.shape(), DType::F32, Device::cpu());
    for (int64_t i = 0; i < x.numel(); ++i) y_.f32()[i] = x.f32()[i] / 20;
    return y_;
  }
  const Tensor& do_backward(const Tensor& dy) override {
    ensure(dx_, dy.shape(), DType::F32, Device::cpu());
    for (int64_t i = 0; i < dy.numel(); ++i) dx_.f32()[i] = dy.f32()[i] / (broken_ ? 19 : 20);
    return dx_;
  }

 private:
  bool broken_;
  Tensor y_, dx_;
};

TEST(CheckGradients, SmallGradientsAreJudgedAtTheirOwnScale) {
  // Every gradient is below 0.05: a 5% error is below 0.003 in absolute terms, but 5x the
  // tolerance of the tensor's own largest element.
  Shrink right(false), wrong(true);
  const GradientCheckReport ok = check_gradients(right, Shape{16});
  EXPECT_TRUE(ok.passed) << ok.summary();
  const GradientCheckReport bad = check_gradients(wrong, Shape{16});
  EXPECT_FALSE(bad.passed) << bad.summary();
  EXPECT_GT(bad.max_error, 4 * GradientCheckOptions{}.tolerance) << bad.summary();  // 1/19 - 1/20 of 1/20: 5.3%
}

TEST(CheckGradients, CurvatureIsNotAKink) {
  // The documented example: a mean squared error at outputs in [-1, 1]. Its one-sided slopes
  // differ by 2h / 12 around a gradient of 2|e| / 12: more than 1e-2 of it wherever |e| < 1/2,
  // but by half that at half the step, and the central differences agree: checked, not skipped.
  const Tensor z = Tensor::uniform(Shape{4, 3}, -1, 1, /*seed=*/1, Device::cpu());
  const Tensor t = Tensor::zeros(Shape{4, 3}, DType::F32, Device::cpu());
  losses::MeanSquaredError mse;
  const GradientCheckReport r = check_gradients(mse, z, t);
  EXPECT_TRUE(r.passed) << r.summary();
  EXPECT_EQ(r.skipped, 0) << r.summary();
  HalfGradientMse wrong;
  EXPECT_FALSE(check_gradients(wrong, z, t).passed);

  Bend square(0.0f, false);
  const GradientCheckReport s = check_gradients(square, Shape{12});
  EXPECT_TRUE(s.passed) << s.summary();
  EXPECT_EQ(s.skipped, 0) << s.summary();
}

TEST(CheckGradients, AKinkInsideTheStepIsSkippedWhereverItSits) {
  // One input at distances 0, h/3 (where the one-sided slopes' difference halves with the step
  // as curvature's does, and only the central differences tell) and 2h/3 (outside the half
  // step) from the kink; the other 23 inputs away from it. Each is skipped, not judged against
  // a central difference that straddles the jump.
  const double h = GradientCheckOptions{}.step;
  for (const double at : {0.0, h / 3, 2 * h / 3}) {
    Tensor x = Tensor::uniform(Shape{2, 12}, 0.6f, 1.0f, 5, Device::cpu());  // the rest >= 0.1 above it
    const float c = 0.5f;
    x.f32()[7] = static_cast<float>(c - at);  // the kink c lies `at` above x[7]
    Bend bend(c, true);
    bend.build(Shape{12});
    std::vector<Tensor> none;
    bend.bind(none, none);
    const GradientCheckReport r = check_gradients(bend, x);
    EXPECT_EQ(r.skipped, 1) << "kink at +" << at << ": " << r.summary();
    EXPECT_TRUE(r.passed) << "kink at +" << at << ": " << r.summary();
  }
  // A small jump (7% of the slope) near a third of the step, where its one-sided slopes' difference
  // halves with the step as curvature's does: skipped, or within the tolerance, never a failure.
  for (const double t : {0.2, 0.25, 0.285, 1.0 / 3}) {
    Tensor x = Tensor::uniform(Shape{2, 12}, 0.6f, 1.0f, 5, Device::cpu());
    const float c = 0.5f;
    x.f32()[7] = static_cast<float>(c - t * h);
    Bend bend(c, true, 0.928f);
    bend.build(Shape{12});
    std::vector<Tensor> none;
    bend.bind(none, none);
    const GradientCheckReport r = check_gradients(bend, x);
    EXPECT_TRUE(r.passed) << "a jump of 0.072 at +" << t << " h: " << r.summary();
  }
}

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
