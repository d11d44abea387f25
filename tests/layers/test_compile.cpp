// A model compiled with a loss and metrics (Model::compile(optimizer, loss, metrics)) on data of
// any kind (Dataset::from_vectors, split, validation_split): what fit, evaluate and the history
// report, how the loss meets a final Softmax, sliced batches, a user's loss, and the refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "test_util.h"

namespace ember {
namespace {

// y = 2 x0 - x1 + 0.5 on 256 points in [-1, 1]^2: a Dense(1) can fit it exactly.
Dataset linear_data(int64_t n = 256) {
  const Tensor x = test::random_tensor(Shape{n, 2}, 21, -1.0f, 1.0f);
  std::vector<float> y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) y[static_cast<size_t>(i)] = 2 * x.f32()[2 * i] - x.f32()[2 * i + 1] + 0.5f;
  return Dataset::from_vectors(std::span<const float>(x.f32(), static_cast<size_t>(2 * n)), Shape{2}, y, Shape{});
}

MetricList mae_mse() {
  return {std::make_shared<metrics::MeanAbsoluteError>(), std::make_shared<metrics::MeanSquaredError>()};
}

TEST(Compile, ARegressionOnVectorsTrainsWithMseAndReportsItsMetrics) {
  const Dataset data = linear_data();
  EXPECT_EQ(data.target_shape(), Shape{1});  // one value per sample: (N, 1)
  Sequential m;
  m.add<Dense>(1);
  m.build(Shape{2}, 3);
  m.compile(std::make_unique<Adam>(AdamOptions{.learning_rate = 0.05f}), std::make_unique<losses::MeanSquaredError>(),
            mae_mse());
  const History h = m.fit(data, {.epochs = 30, .batch_size = 32, .verbose = 0});
  const EpochLogs& last = h.epochs.back();
  ASSERT_EQ(last.metrics.size(), 2u);
  EXPECT_EQ(last.metrics[0].first, "mae");
  EXPECT_EQ(last.metrics[1].first, "mse");
  // The MSE metric and the MSE loss read the same outputs through the same formula.
  EXPECT_EQ(last.metrics[1].second, last.loss);
  EXPECT_EQ(last.accuracy, 0.0);  // not compiled with it
  EXPECT_LT(last.loss, 1e-4) << "a linear target a Dense fits exactly";
  EXPECT_LT(last.loss, h.epochs.front().loss / 100);

  // evaluate's metrics are the means over the samples of what predict returns.
  const EvalResult e = m.evaluate(data, 100);  // 3 batches
  const Tensor p = m.predict(data.features());
  double mae = 0, mse = 0;
  for (int64_t i = 0; i < data.size(); ++i) {
    const double d = static_cast<double>(p.f32()[i]) - data.targets().f32()[i];
    mae += std::fabs(d);
    mse += d * d;
  }
  mae /= static_cast<double>(data.size());
  mse /= static_cast<double>(data.size());
  // The same float outputs summed in double in another grouping: 256 adds reordered, at most
  // 256 x 2^-53 (2.8e-14) of the sum.
  EXPECT_NEAR(find_value(e.metrics, "mae").value(), mae, 1e-13 * mae);
  EXPECT_NEAR(find_value(e.metrics, "mse").value(), mse, 1e-13 * mse);
  EXPECT_NEAR(e.loss, mse, 1e-13 * mse);
}

TEST(Compile, DataTheLossCannotReadIsRefusedNamingBoth) {
  const Dataset data = linear_data(64);
  Sequential m;
  m.add<Dense>(1);
  m.build(Shape{2}, 3);
  m.compile(std::make_unique<Adam>());  // sparse softmax cross-entropy: wants i32 labels
  try {
    m.fit(data, {.epochs = 1, .verbose = 0});
    FAIL() << "no error";
  } catch (const ShapeError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("fit: sparse_categorical_crossentropy"), std::string::npos) << msg;
    EXPECT_NE(msg.find("f32 (1,)"), std::string::npos) << msg;
  }
  EXPECT_THROW(m.evaluate(data), ShapeError);
  m.compile(std::make_unique<Adam>(), std::make_unique<losses::MeanSquaredError>(),
            {std::make_shared<metrics::SparseCategoricalAccuracy>()});  // a metric that cannot read it
  EXPECT_THROW(m.evaluate(data), ShapeError);
  EXPECT_THROW(
      m.compile(std::make_unique<Adam>(), std::make_unique<losses::MeanSquaredError>(),
                {std::make_shared<metrics::MeanSquaredError>(), std::make_shared<metrics::MeanSquaredError>()}),
      ArgumentError);  // two metrics of one name
}

// Multi-label: two binary targets per sample from a Dense(2), sliced (16-row micro-batches) and
// whole, and the sliced step's sums.
TEST(Compile, ASlicedMultiLabelStepMeansWhatTheWholeBatchMeans) {
  const Tensor x = test::random_tensor(Shape{64, 6}, 31);
  Tensor t = Tensor::empty(Shape{64, 2}, DType::F32, Device::cpu());
  for (int64_t i = 0; i < 64; ++i) {
    t.f32()[2 * i] = x.f32()[6 * i] > 0 ? 1.0f : 0.0f;
    t.f32()[2 * i + 1] = x.f32()[6 * i + 1] + x.f32()[6 * i + 2] > 0 ? 1.0f : 0.0f;
  }
  const auto make = [](int64_t micro) {
    Sequential m;
    m.add<Dense>(8, Activation::ReLU);
    m.add<Dense>(2);
    m.build(Shape{6}, 5);
    m.set_cpu_micro_batch(micro);
    m.compile(std::make_unique<Adam>(), std::make_unique<losses::BinaryCrossentropy>(),
              {std::make_shared<metrics::BinaryAccuracy>()});
    return m;
  };
  Sequential whole = make(0), sliced = make(16);
  MetricSums a = whole.make_sums(), b = sliced.make_sums();
  whole.compute_gradients(x, t, a);
  sliced.compute_gradients(x, t, b);
  const std::vector<float> ga = whole.grads().to_vector(), gb = sliced.grads().to_vector();
  // The batch's sum order (core/pairwise_sum.h): a 16-row slice is one group of the whole batch's
  // weight gradients, and the slices' tree is the groups' tree, so the same bits; a wrong slice
  // mean would be off by 4x.
  EXPECT_EQ(ga, gb);
  EXPECT_NEAR(b.read().loss_sum, a.read().loss_sum, 1e-12 * a.read().loss_sum);
  EXPECT_EQ(b.read().metrics[0], a.read().metrics[0]);  // sums of halves: exact
  EXPECT_EQ(b.read().finite_batches, 1);
}

TEST(Compile, AFinalSoftmaxIsSkippedOnlyForLossesThatTakeLogits) {
  Sequential m;
  m.add<Dense>(3);
  m.add<Softmax>();
  m.build(Shape{4}, 1);
  const Tensor x = test::random_tensor(Shape{5, 4}, 2);
  const std::vector<float> probs = m.forward(x, false).to_vector();
  m.compile(std::make_unique<Adam>());  // sparse cross-entropy: reads the logits
  EXPECT_NE(m.forward_logits(x, false).to_vector(), probs);
  m.compile(std::make_unique<Adam>(), std::make_unique<losses::MeanSquaredError>());  // reads the probabilities
  EXPECT_EQ(m.forward_logits(x, false).to_vector(), probs);
  m.compile(std::make_unique<Adam>(), std::make_unique<losses::CategoricalCrossentropy>(),
            {std::make_shared<metrics::MeanSquaredError>()});
  EXPECT_NE(m.forward_logits(x, false).to_vector(), probs);
  // The loss reads logits, but metrics see the model's output (Keras' y_pred): the probabilities.
  Tensor onehot = Tensor::zeros(Shape{5, 3}, DType::F32, Device::cpu());
  for (int64_t i = 0; i < 5; ++i) onehot.f32()[i * 3 + i % 3] = 1.0f;
  const EvalResult e = m.evaluate(Dataset::from_tensors(x, onehot), 5);
  double mse = 0;
  for (int64_t i = 0; i < 15; ++i) {
    const double d = static_cast<double>(probs[size_t(i)]) - onehot.f32()[i];
    mse += d * d;
  }
  mse /= 15.0;
  EXPECT_NEAR(find_value(e.metrics, "mse").value(), mse, 1e-12);  // the same floats, summed in double
}

TEST(Compile, ValidationSplitHoldsOutTheLastFractionBeforeShuffling) {
  const Dataset data = linear_data(100);
  Sequential m;
  m.add<Dense>(1);
  m.build(Shape{2}, 3);
  m.compile(std::make_unique<Adam>(), std::make_unique<losses::MeanSquaredError>(), mae_mse());
  const History h = m.fit(data, {.epochs = 2, .batch_size = 16, .verbose = 0, .validation_split = 0.2});
  ASSERT_EQ(h.epochs.size(), 2u);
  EXPECT_EQ(h.epochs[1].val_samples, 20);
  EXPECT_EQ(h.epochs[1].steps, 5);  // 80 training samples in batches of 16
  // The held-out samples are the last 20: evaluating them gives the logged values exactly.
  const EvalResult e = m.evaluate(data.slice(80, 100), 256);
  EXPECT_EQ(*h.epochs[1].val_loss, e.loss);
  EXPECT_EQ(find_value(h.epochs[1].val_metrics, "mae"), find_value(e.metrics, "mae"));
  EXPECT_FALSE(h.epochs[1].val_accuracy.has_value());

  EXPECT_THROW(m.fit(data, {.verbose = 0, .validation_split = 0.2}, &data), ArgumentError);
  EXPECT_THROW(m.fit(data, {.verbose = 0, .validation_split = 1.0}), ArgumentError);
  EXPECT_THROW(m.fit(data, {.verbose = 0, .validation_split = 1e-17}), ArgumentError);  // nothing held out
  // Keras' rounding: of 10 samples at 0.25, floor(7.5) = 7 train and 3 validate.
  const History k = m.fit(linear_data(10), {.epochs = 1, .verbose = 0, .validation_split = 0.25});
  EXPECT_EQ(k.epochs[0].val_samples, 3);
}

TEST(Dataset, SplitIsASeededPermutationIntoTwoParts) {
  std::vector<float> x(40), y(40);
  std::iota(x.begin(), x.end(), 0.0f);
  std::iota(y.begin(), y.end(), 0.0f);
  const Dataset d = Dataset::from_vectors(x, Shape{1}, y, Shape{});
  const auto [train, held] = d.split(0.25, 7);
  ASSERT_EQ(train.size(), 30);
  ASSERT_EQ(held.size(), 10);
  std::vector<float> seen;
  for (const Dataset* p : {&train, &held})
    for (int64_t i = 0; i < p->size(); ++i) {
      EXPECT_EQ(p->features().f32()[i], p->targets().f32()[i]);  // rows stay whole
      seen.push_back(p->targets().f32()[i]);
    }
  std::vector<float> sorted = seen;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, y);  // every sample once
  EXPECT_NE(seen, y);    // shuffled
  EXPECT_EQ(d.split(0.25, 7).second.targets().to_vector(), held.targets().to_vector());
  EXPECT_NE(d.split(0.25, 8).second.targets().to_vector(), held.targets().to_vector());
  EXPECT_THROW(d.split(0.0, 1), ArgumentError);
  EXPECT_THROW(Dataset::from_vectors(x, Shape{3}, y, Shape{}), ShapeError);  // 40 is not whole samples of 3
  EXPECT_THROW(Dataset::from_vectors(x, Shape{1}, std::span<const float>(y.data(), 39), Shape{}), ShapeError);
}

// A loss of one's own, as docs/usage.md shows it: squared error weighted per output, on the CPU.
class WeightedSquaredError : public Loss {
 public:
  explicit WeightedSquaredError(std::vector<float> w) : w_(std::move(w)) {}
  std::string name() const override { return "weighted_squared_error"; }
  std::unique_ptr<Loss> clone() const override { return std::make_unique<WeightedSquaredError>(w_); }
  void check(const Shape& output, DType target, const Shape& target_sample) const override {
    EMBER_CHECK(target == DType::F32 && target_sample == output && output.numel() == static_cast<int64_t>(w_.size()),
                ShapeError, "weighted_squared_error: outputs and targets of " + std::to_string(w_.size()));
  }
  void forward(const Tensor& outputs, const Tensor& targets, MetricSums& sums) override {
    z_ = outputs;
    t_ = targets;
    double total = 0;
    for (int64_t i = 0; i < outputs.numel(); ++i) {
      const double e = outputs.f32()[i] - targets.f32()[i];
      total += w_[static_cast<size_t>(i) % w_.size()] * e * e;
    }
    sums.add_loss(total);
  }
  const Tensor& backward(int64_t mean_rows) override {
    const int64_t n = rows_for_mean(mean_rows, z_);
    ensure(g_, z_.shape(), DType::F32, Device::cpu());
    for (int64_t i = 0; i < z_.numel(); ++i)
      g_.f32()[i] = 2 * w_[static_cast<size_t>(i) % w_.size()] * (z_.f32()[i] - t_.f32()[i]) / static_cast<float>(n);
    return g_;
  }

 private:
  std::vector<float> w_;
  Tensor z_, t_, g_;
};

TEST(Compile, AUserLossTrainsAndIsCheckedLikeABuiltIn) {
  const Dataset data = linear_data();
  Sequential m;
  m.add<Dense>(1);
  m.build(Shape{2}, 3);
  m.compile(std::make_unique<Adam>(AdamOptions{.learning_rate = 0.05f}),
            std::make_unique<WeightedSquaredError>(std::vector<float>{3.0f}), mae_mse());
  const History h = m.fit(data, {.epochs = 30, .batch_size = 32, .verbose = 0});
  // Three times the squared error: the metric (unweighted) is a third of the loss.
  EXPECT_NEAR(find_value(h.epochs.back().metrics, "mse").value() * 3, h.epochs.back().loss, 1e-9);
  EXPECT_LT(h.epochs.back().loss, 1e-3);
  // Its gradient is its value's: against finite differences.
  WeightedSquaredError probe({3.0f});
  Tensor z = test::random_tensor(Shape{4, 1}, 4), t = test::random_tensor(Shape{4, 1}, 5);
  MetricSums s(Device::cpu());
  probe.forward(z, t, s);
  const std::vector<float> analytic = probe.backward(0).to_vector();
  WeightedSquaredError p2({3.0f});
  test::GradCheckOptions opt;
  opt.step = 1e-3;  // a quadratic's one-sided slopes differ by 2 w h / n: below the kink threshold at this step
  test::check_gradient([&] { return double(p2.value(z, t)); }, std::span<float>(z.f32(), 4), analytic, "z", opt);
  m.compile(std::make_unique<Adam>(), std::make_unique<WeightedSquaredError>(std::vector<float>{1.0f, 2.0f}));
  EXPECT_THROW(m.evaluate(data), ShapeError);
}

}  // namespace
}  // namespace ember
