// Merge layers: each output and input gradient against the formula evaluated in the same float
// order (so equal bit for bit: these ops round once per step and nothing else may differ), mixed
// layouts, Concatenate's axes, Maximum's ties, and the errors.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

namespace ember {
namespace {

std::vector<const Tensor*> ptrs(const std::vector<Tensor>& xs) {
  std::vector<const Tensor*> out;
  for (const Tensor& x : xs) out.push_back(&x);
  return out;
}

std::vector<Tensor> inputs(size_t n, const Shape& shape, uint64_t seed) {
  std::vector<Tensor> xs;
  for (size_t i = 0; i < n; ++i) xs.push_back(test::random_tensor(shape, seed + i));
  return xs;
}

std::vector<Shape> sample_shapes(const std::vector<Tensor>& xs) {
  std::vector<Shape> out;
  for (const Tensor& x : xs) out.push_back(x.shape().without_batch());
  return out;
}

// Runs forward and backward; returns {y, dx...} as row-major vectors.
std::vector<std::vector<float>> run(Layer& l, const std::vector<Tensor>& xs, const Tensor& dy) {
  l.build_inputs(sample_shapes(xs));
  std::vector<std::vector<float>> out{l.forward_inputs(ptrs(xs), true).to_vector()};
  const std::vector<Tensor>& dxs = l.backward_inputs(dy);
  EXPECT_EQ(dxs.size(), xs.size());
  for (size_t i = 0; i < dxs.size(); ++i) {
    EXPECT_EQ(dxs[i].shape(), xs[i].shape()) << l.type() << " input " << i;
    out.push_back(dxs[i].to_vector());
  }
  return out;
}

const Shape kShape{2, 3, 4, 5};

TEST(Merge, AddSumsLeftToRightAndPassesDyToEveryInput) {
  const auto xs = inputs(3, kShape, 1);
  const Tensor dy = test::random_tensor(kShape, 9);
  Add add;
  const auto r = run(add, xs, dy);
  const auto a = xs[0].to_vector(), b = xs[1].to_vector(), c = xs[2].to_vector(), g = dy.to_vector();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(r[0][i], (a[i] + b[i]) + c[i]) << i;
    for (int k = 1; k <= 3; ++k) EXPECT_EQ(r[k][i], g[i]) << i;
  }
}

TEST(Merge, SubtractNegatesTheSecondInputsGradient) {
  const auto xs = inputs(2, kShape, 3);
  const Tensor dy = test::random_tensor(kShape, 8);
  Subtract sub;
  const auto r = run(sub, xs, dy);
  const auto a = xs[0].to_vector(), b = xs[1].to_vector(), g = dy.to_vector();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(r[0][i], a[i] - b[i]);
    EXPECT_EQ(r[1][i], g[i]);
    EXPECT_EQ(r[2][i], -g[i]);
  }
  Subtract three;
  EXPECT_THROW(three.build_inputs({kShape, kShape, kShape}), ArgumentError);
}

TEST(Merge, MultiplyGivesEachInputDyTimesTheOthers) {
  const auto xs = inputs(3, kShape, 5);
  const Tensor dy = test::random_tensor(kShape, 7);
  Multiply mul;
  const auto r = run(mul, xs, dy);
  const auto a = xs[0].to_vector(), b = xs[1].to_vector(), c = xs[2].to_vector(), g = dy.to_vector();
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(r[0][i], (a[i] * b[i]) * c[i]);
    EXPECT_EQ(r[1][i], (g[i] * b[i]) * c[i]);
    EXPECT_EQ(r[2][i], (g[i] * a[i]) * c[i]);
    EXPECT_EQ(r[3][i], (g[i] * a[i]) * b[i]);
  }
}

TEST(Merge, AverageScalesTheSumAndTheGradientByOneOverN) {
  const auto xs = inputs(3, kShape, 11);
  const Tensor dy = test::random_tensor(kShape, 12);
  Average avg;
  const auto r = run(avg, xs, dy);
  const auto a = xs[0].to_vector(), b = xs[1].to_vector(), c = xs[2].to_vector(), g = dy.to_vector();
  const float third = 1.0f / 3.0f;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(r[0][i], third * ((a[i] + b[i]) + c[i]));
    for (int k = 1; k <= 3; ++k) EXPECT_EQ(r[k][i], third * g[i]);
  }
}

TEST(Merge, MaximumRoutesEachGradientToTheFirstInputHoldingTheMaximum) {
  // Ties on purpose: element 0 ties all three, element 1 ties inputs 1 and 2, element 2 has a
  // single winner, element 3 is won by the first.
  const Shape s{1, 4};
  const std::vector<Tensor> xs{Tensor::from_vector(s, std::vector<float>{1, 0, 5, 9}),
                               Tensor::from_vector(s, std::vector<float>{1, 4, 7, -1}),
                               Tensor::from_vector(s, std::vector<float>{1, 4, -2, 3})};
  const Tensor dy = Tensor::from_vector(s, std::vector<float>{10, 20, 30, 40});
  Maximum max;
  const auto r = run(max, xs, dy);
  EXPECT_EQ(r[0], (std::vector<float>{1, 4, 7, 9}));
  EXPECT_EQ(r[1], (std::vector<float>{10, 0, 0, 40}));
  EXPECT_EQ(r[2], (std::vector<float>{0, 20, 30, 0}));
  EXPECT_EQ(r[3], (std::vector<float>{0, 0, 0, 0}));
  // The gradients sum to dy (each element claimed once), also on a second backward.
  const auto again = run(max, xs, dy);
  EXPECT_EQ(again[1], r[1]);
  EXPECT_EQ(again[2], r[2]);
}

TEST(Merge, InputsOfOtherLayoutsAreConvertedToTheFirstOnes) {
  const auto xs = inputs(2, kShape, 21);
  const std::vector<Tensor> mixed{xs[0].to_layout(Layout::NHWC), xs[1]};
  const Tensor dy = test::random_tensor(kShape, 22);
  Multiply plain, nhwc;
  const auto want = run(plain, xs, dy);
  const auto got = run(nhwc, mixed, dy);
  EXPECT_EQ(got, want);
}

TEST(Merge, ConcatenateJoinsChannelsFeaturesAndLastAxes) {
  struct Case {
    Shape a, b;
    int axis;
    Shape out;  // per sample
  };
  for (const Case& c : {Case{{2, 4, 5}, {3, 4, 5}, 1, {5, 4, 5}}, Case{{3, 4, 2}, {3, 4, 6}, -1, {3, 4, 8}},
                        Case{{3, 1, 5}, {3, 2, 5}, 2, {3, 3, 5}}, Case{{7}, {2}, 1, {9}}}) {
    SCOPED_TRACE(c.a.str() + " + " + c.b.str() + " axis " + std::to_string(c.axis));
    const std::vector<Tensor> xs{test::random_tensor(c.a.with_batch(2), 1), test::random_tensor(c.b.with_batch(2), 2)};
    Concatenate cat(c.axis);
    EXPECT_EQ(cat.build_inputs({c.a, c.b}), c.out);
    const Tensor& y = cat.forward_inputs(ptrs(xs), true);
    ASSERT_EQ(y.shape(), c.out.with_batch(2));
    // Element by element: the output index's position along the axis says which input it is.
    const int ax = (c.axis < 0 ? c.axis + c.a.rank() + 1 : c.axis) - 1;
    int64_t outer = 2, inner = 1;
    for (int d = 0; d < ax; ++d) outer *= c.a[d];
    for (int d = ax + 1; d < c.a.rank(); ++d) inner *= c.a[d];
    const auto yv = y.to_vector(), av = xs[0].to_vector(), bv = xs[1].to_vector();
    const int64_t na = c.a[ax], nb = c.b[ax];
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t k = 0; k < na + nb; ++k)
        for (int64_t i = 0; i < inner; ++i) {
          const float want = k < na ? av[static_cast<size_t>((o * na + k) * inner + i)]
                                    : bv[static_cast<size_t>((o * nb + k - na) * inner + i)];
          ASSERT_EQ(yv[static_cast<size_t>((o * (na + nb) + k) * inner + i)], want);
        }
    // The backward hands each input its part of dy: with dy = y, the inputs themselves.
    const std::vector<Tensor>& dxs = cat.backward_inputs(y);
    EXPECT_EQ(dxs[0].to_vector(), av);
    EXPECT_EQ(dxs[1].to_vector(), bv);
  }
}

TEST(Merge, ConcatenateTakesNhwcInputsInThePublicOrder) {
  const auto xs = inputs(2, kShape, 31);
  const std::vector<Tensor> mixed{xs[0].to_layout(Layout::NHWC), xs[1]};
  Concatenate a, b;
  a.build_inputs(sample_shapes(xs));
  b.build_inputs(sample_shapes(xs));
  EXPECT_EQ(b.forward_inputs(ptrs(mixed), true).to_vector(), a.forward_inputs(ptrs(xs), true).to_vector());
}

TEST(Merge, RefusesWhatDoesNotFit) {
  Add add;
  EXPECT_THROW(add.build_inputs({kShape}), ArgumentError);                    // one input
  EXPECT_THROW(add.build_inputs({Shape{3, 4}, Shape{3, 5}}), ShapeError);     // no broadcasting
  EXPECT_THROW(add.build_inputs({Shape{3, 4}, Shape{3, 4, 1}}), ShapeError);  // ranks
  EXPECT_THROW(add.build(Shape{3, 4}), ArgumentError);                        // the one-input interface
  Concatenate batch(0), beyond(4), ok(-3);
  EXPECT_THROW(batch.build_inputs({Shape{3, 4, 5}, Shape{3, 4, 5}}), ArgumentError);
  EXPECT_THROW(beyond.build_inputs({Shape{3, 4, 5}, Shape{3, 4, 5}}), ArgumentError);
  EXPECT_EQ(ok.build_inputs({Shape{3, 4, 5}, Shape{2, 4, 5}}), (Shape{5, 4, 5}));
  Concatenate mismatch;
  EXPECT_THROW(mismatch.build_inputs({Shape{3, 4, 5}, Shape{3, 4, 6}}), ShapeError);
  Multiply mul;
  EXPECT_THROW(mul.backward_inputs(test::random_tensor(kShape, 1)), Error);  // before forward
}

}  // namespace
}  // namespace ember
