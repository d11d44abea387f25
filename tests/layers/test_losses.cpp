// The losses and metrics beyond sparse softmax cross-entropy (layers/loss.h, metrics.h): values
// and gradients against their definitions written out here in long double, finite differences,
// the metrics' counts (ties included), shape errors, and a model compiled with them.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>

#include "test_util.h"

namespace ember {
namespace {

using LD = long double;

Tensor labels_of(std::vector<int32_t> v) {
  Tensor t = Tensor::empty(Shape{static_cast<int64_t>(v.size())}, DType::I32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

LD sigmoid(LD z) { return 1.0L / (1.0L + std::exp(-z)); }

// Each point loss's definition per element (Keras' formulas, written in their textbook form).
struct PointCase {
  const char* name;
  std::function<std::unique_ptr<Loss>()> make;
  std::function<LD(LD z, LD t)> value, grad;  // d(value)/dz
  bool probabilities = false;                 // outputs in (0, 1)
};

std::vector<PointCase> point_cases() {
  const LD delta = 0.7f, s = 0.1f;  // the float parameters the losses hold
  return {
      {"mse", [] { return std::make_unique<losses::MeanSquaredError>(); }, [](LD z, LD t) { return (z - t) * (z - t); },
       [](LD z, LD t) { return 2 * (z - t); }},
      {"mae", [] { return std::make_unique<losses::MeanAbsoluteError>(); }, [](LD z, LD t) { return std::fabs(z - t); },
       [](LD z, LD t) { return z > t ? 1.0L : -1.0L; }},
      {"huber", [] { return std::make_unique<losses::Huber>(0.7f); },
       [delta](LD z, LD t) {
         const LD e = std::fabs(z - t);
         return e <= delta ? e * e / 2 : delta * e - delta * delta / 2;
       },
       [delta](LD z, LD t) { return std::fabs(z - t) <= delta ? z - t : (z > t ? delta : -delta); }},
      {"bce_logits", [] { return std::make_unique<losses::BinaryCrossentropy>(); },
       [](LD z, LD t) { return -(t * std::log(sigmoid(z)) + (1 - t) * std::log(1 - sigmoid(z))); },
       [](LD z, LD t) { return sigmoid(z) - t; }},
      {"bce_logits_smoothed", [] { return std::make_unique<losses::BinaryCrossentropy>(true, 0.1f); },
       [s](LD z, LD t) {
         const LD ts = t * (1 - s) + s / 2;
         return -(ts * std::log(sigmoid(z)) + (1 - ts) * std::log(1 - sigmoid(z)));
       },
       [s](LD z, LD t) { return sigmoid(z) - (t * (1 - s) + s / 2); }},
      {"bce_probabilities", [] { return std::make_unique<losses::BinaryCrossentropy>(false); },
       // Keras: -(t log(p + eps) + (1 - t) log(1 - p + eps)) with p inside [eps, 1 - eps] here.
       [](LD p, LD t) { return -(t * std::log(p + 1e-7L) + (1 - t) * std::log(1 - p + 1e-7L)); },
       [](LD p, LD t) { return -(t / (p + 1e-7L) - (1 - t) / (1 - p + 1e-7L)); }, true},
  };
}

// Outputs and targets for a case: 5 samples of (3, 4); logits in [-4, 4] (beyond Huber's delta
// on both sides), probabilities in [0.05, 0.95], targets in [0, 1].
std::pair<Tensor, Tensor> point_data(const PointCase& c, uint64_t seed) {
  Tensor z = c.probabilities ? test::random_tensor(Shape{5, 3, 4}, seed, 0.05f, 0.95f)
                             : test::random_tensor(Shape{5, 3, 4}, seed, -4.0f, 4.0f);
  return {z, test::random_tensor(Shape{5, 3, 4}, seed + 1, 0.0f, 1.0f)};
}

TEST(PointLosses, ValuesAreTheMeanOverElementsThenSamplesOfTheirDefinitions) {
  for (const PointCase& c : point_cases()) {
    const auto [z, t] = point_data(c, 1);
    LD want = 0;
    for (int64_t i = 0; i < z.numel(); ++i) want += c.value(z.f32()[i], t.f32()[i]);
    want /= static_cast<LD>(z.numel());  // 12 elements per sample, then 5 samples: one mean
    const auto loss = c.make();
    MetricSums sums(Device::cpu());
    loss->forward(z, t, sums);
    const double got = sums.read().loss_sum / 5.0;
    // The kernel sums exact float inputs in double: its error is double rounding (~1e-16) plus
    // log1p/exp's in double; 1e-12 relative leaves room for both and for nothing else.
    EXPECT_NEAR(got, static_cast<double>(want), 1e-12 * std::fabs(static_cast<double>(want))) << c.name;
    EXPECT_EQ(sums.read().finite_batches, 1) << c.name;
  }
}

TEST(PointLosses, GradientsAreTheirDefinitionsDerivativeOverTheMean) {
  for (const PointCase& c : point_cases()) {
    const auto [z, t] = point_data(c, 3);
    const auto loss = c.make();
    MetricSums sums(Device::cpu());
    loss->forward(z, t, sums);
    const int64_t mean_rows = 8;  // as when these 5 rows are a slice of a batch of 8
    const std::vector<float> g = loss->backward(mean_rows).to_vector();
    const LD scale = 1.0L / (12.0L * mean_rows);
    for (int64_t i = 0; i < z.numel(); ++i) {
      const LD want = c.grad(z.f32()[i], t.f32()[i]) * scale;
      // Float arithmetic of a few operations (a sigmoid: expf, an add, a divide; then the scale):
      // 8 float ulps of the largest term (1 for BCE, |grad| else) covers it.
      const LD bound = 8 * FLT_EPSILON * scale * std::max<LD>(1.0L, std::fabs(want / scale));
      EXPECT_NEAR(g[static_cast<size_t>(i)], static_cast<double>(want), static_cast<double>(bound))
          << c.name << " element " << i;
    }
  }
}

TEST(PointLosses, GradientsMatchFiniteDifferencesOfTheirValues) {
  for (const PointCase& c : point_cases()) {
    auto [z, t] = point_data(c, 5);
    const auto loss = c.make();
    MetricSums sums(Device::cpu());
    loss->forward(z, t, sums);
    const std::vector<float> analytic = loss->backward().to_vector();
    const auto probe = c.make();
    test::GradCheckOptions opt;
    opt.step = 1e-3;  // MAE and Huber have kinks at |e| = 0 and delta: skipped as kinks
    test::check_gradient([&] { return double(probe->value(z, t)); }, std::span<float>(z.f32(), 60), analytic, c.name,
                         opt);
  }
}

TEST(CategoricalCrossentropy, OneHotTargetsGiveTheSparseLossAndGradient) {
  const Tensor z = test::random_tensor(Shape{6, 5}, 7, -3.0f, 3.0f);
  const std::vector<int32_t> y{0, 4, 2, 2, 1, 3};
  Tensor onehot = Tensor::zeros(Shape{6, 5}, DType::F32, Device::cpu());
  for (size_t i = 0; i < y.size(); ++i) onehot.f32()[i * 5 + static_cast<size_t>(y[i])] = 1.0f;
  losses::SparseCategoricalCrossentropy sparse;
  losses::CategoricalCrossentropy dense;
  MetricSums a(Device::cpu()), b(Device::cpu());
  sparse.forward(z, labels_of(y), a);
  dense.forward(z, onehot, b);
  // The same double sum: log(sum) - (z_y - m), plus exact zeros for the other classes.
  EXPECT_EQ(a.read().loss_sum, b.read().loss_sum);
  const std::vector<float> ga = sparse.backward().to_vector(), gb = dense.backward().to_vector();
  // p/N - 1/N against (p * 1 - 1) / N: one rounding apart, at most an ulp of 1/N.
  for (size_t i = 0; i < ga.size(); ++i) EXPECT_NEAR(ga[i], gb[i], FLT_EPSILON / 6.0) << i;
}

TEST(CategoricalCrossentropy, SmoothedAndSoftTargetsMatchTheDefinition) {
  const Tensor z = test::random_tensor(Shape{4, 3}, 11, -2.0f, 2.0f);
  Tensor t = test::random_tensor(Shape{4, 3}, 12, 0.0f, 1.0f);  // any non-negative weights
  const LD s = 0.2L;
  LD want = 0;
  for (int i = 0; i < 4; ++i) {
    LD lse = 0;
    for (int j = 0; j < 3; ++j) lse += std::exp(static_cast<LD>(z.f32()[i * 3 + j]));
    lse = std::log(lse);
    for (int j = 0; j < 3; ++j) want += (t.f32()[i * 3 + j] * (1 - s) + s / 3) * (lse - z.f32()[i * 3 + j]);
  }
  losses::CategoricalCrossentropy loss(0.2f);
  MetricSums sums(Device::cpu());
  loss.forward(z, t, sums);
  // The softmax's exps are rounded to float before their double sum: 2^-24 relative each, so
  // log(sum) is off by at most ~6e-8 per row, weighted by the row's target mass (< 2).
  EXPECT_NEAR(sums.read().loss_sum, static_cast<double>(want), 4 * 2 * 6e-8);
  const std::vector<float> analytic = loss.backward().to_vector();
  losses::CategoricalCrossentropy probe(0.2f);
  Tensor zz = z.clone();
  test::GradCheckOptions opt;
  opt.step = 1e-3;
  test::check_gradient([&] { return double(probe.value(zz, t)); }, std::span<float>(zz.f32(), 12), analytic, "logits",
                       opt);
}

TEST(Metrics, EachCountsWhatItsDefinitionSays) {
  // Row 0: a tie between classes 0 and 1 (the first wins); row 2: the label's logit ties with
  // two others for the top (TF's in_top_k counts it in for any k).
  const Tensor z = Tensor::from_vector(Shape{3, 4}, std::vector<float>{2, 2, 0, 1, 0, 1, 3, 2, 1, 1, 1, 0});
  const Tensor y = labels_of({1, 3, 2});
  MetricSums sums(Device::cpu(), 4);
  metrics::SparseCategoricalAccuracy().accumulate(z, y, sums, 4);       // row 0: argmax 0 != 1; none right
  metrics::SparseTopKCategoricalAccuracy(2).accumulate(z, y, sums, 5);  // rows 0 (2 ties), 1 (2nd), 2 (tie)
  metrics::SparseTopKCategoricalAccuracy(1).accumulate(z, y, sums, 6);  // rows 0 and 2: nothing greater
  metrics::SparseCategoricalAccuracy().accumulate(z, labels_of({0, 2, 0}), sums, 7);
  const std::vector<double> m = sums.read().metrics;
  EXPECT_EQ(m[0], 0.0);
  EXPECT_EQ(m[1], 3.0);
  EXPECT_EQ(m[2], 2.0);  // TF's in_top_k: a tie at the top is in, though argmax picks another
  EXPECT_EQ(m[3], 3.0);

  // Binary accuracy from logits at threshold 0.5: z > 0; at 0.8: z > log(4).
  const Tensor bz = Tensor::from_vector(Shape{2, 3}, std::vector<float>{-1.0f, 0.5f, 2.0f, 1.0f, 0.0f, 1.5f});
  const Tensor bt = Tensor::from_vector(Shape{2, 3}, std::vector<float>{0, 1, 1, 1, 1, 0});
  MetricSums b(Device::cpu(), 3);
  metrics::BinaryAccuracy().accumulate(bz, bt, b, 4);             // row 0: 3/3; row 1: 1/3
  metrics::BinaryAccuracy(0.8f).accumulate(bz, bt, b, 5);         // see below
  metrics::BinaryAccuracy(0.5f, false).accumulate(bz, bt, b, 6);  // probabilities: z > 0.5
  const std::vector<double> bm = b.read().metrics;
  EXPECT_DOUBLE_EQ(bm[0], 1.0 + 1.0 / 3.0);
  // threshold logit log(4) = 1.386: row 0 predicts {0, 0, 1} -> 2/3; row 1 {0, 0, 1} vs {1, 1, 0} -> 0.
  EXPECT_DOUBLE_EQ(bm[1], 2.0 / 3.0);
  // z > 0.5: row 0 {0, 0, 1} -> 2/3; row 1 {1, 0, 1} vs {1, 1, 0} -> 1/3.
  EXPECT_DOUBLE_EQ(bm[2], 1.0);

  // Categorical accuracy, MAE and MSE.
  const Tensor cz = Tensor::from_vector(Shape{2, 2}, std::vector<float>{0.0f, 1.0f, 3.0f, -1.0f});
  const Tensor ct = Tensor::from_vector(Shape{2, 2}, std::vector<float>{0.0f, 1.0f, 0.0f, 1.0f});
  MetricSums c(Device::cpu(), 3);
  metrics::CategoricalAccuracy().accumulate(cz, ct, c, 4);
  metrics::MeanAbsoluteError().accumulate(cz, ct, c, 5);
  metrics::MeanSquaredError().accumulate(cz, ct, c, 6);
  const std::vector<double> cm = c.read().metrics;
  EXPECT_EQ(cm[0], 1.0);
  EXPECT_DOUBLE_EQ(cm[1], 0.0 + (3.0 + 2.0) / 2.0);
  EXPECT_DOUBLE_EQ(cm[2], 0.0 + (9.0 + 4.0) / 2.0);
}

TEST(Losses, AShapeOrDtypeThatDoesNotFitIsNamedWithBoth) {
  try {
    losses::MeanSquaredError().check(Shape{10}, DType::I32, Shape{});
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("mean_squared_error"), std::string::npos) << m;
    EXPECT_NE(m.find("(10,)"), std::string::npos) << m;
    EXPECT_NE(m.find("i32"), std::string::npos) << m;
  }
  EXPECT_THROW(losses::SparseCategoricalCrossentropy().check(Shape{10}, DType::F32, Shape{10}), ShapeError);
  EXPECT_THROW(losses::CategoricalCrossentropy().check(Shape{10}, DType::F32, Shape{9}), ShapeError);
  EXPECT_THROW(metrics::CategoricalAccuracy().check(Shape{10}, DType::I32, Shape{}), ShapeError);
  EXPECT_NO_THROW(losses::BinaryCrossentropy().check(Shape{2}, DType::F32, Shape{2}));
  EXPECT_THROW(losses::Huber(0.0f), ArgumentError);
  EXPECT_THROW(losses::CategoricalCrossentropy(1.5f), ArgumentError);
  EXPECT_THROW(metrics::BinaryAccuracy(1.0f), ArgumentError);
}

}  // namespace
}  // namespace ember
