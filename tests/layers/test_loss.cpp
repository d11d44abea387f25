// Softmax cross-entropy: values against a hand computation, gradient check, accuracy, bad labels.
#include <gtest/gtest.h>

#include <cmath>

#include "test_util.h"

namespace ember {
namespace {

Tensor labels_of(std::vector<int32_t> v) {
  Tensor t = Tensor::empty(Shape{static_cast<int64_t>(v.size())}, DType::I32);
  std::copy(v.begin(), v.end(), t.data<int32_t>());
  return t;
}

TEST(SoftmaxCrossEntropy, ValueMatchesHandComputation) {
  const Tensor logits = Tensor::from_vector(Shape{2, 3}, std::vector<float>{1.0f, 2.0f, 3.0f, 0.0f, 0.0f, 0.0f});
  SoftmaxCrossEntropy loss;
  const float value = loss.forward(logits, labels_of({2, 0}));
  const double row0 = -std::log(std::exp(3.0) / (std::exp(1.0) + std::exp(2.0) + std::exp(3.0)));
  const double row1 = std::log(3.0);
  EXPECT_NEAR(value, (row0 + row1) / 2, 1e-6);
}

TEST(SoftmaxCrossEntropy, StableForHugeLogits) {
  const Tensor logits = Tensor::from_vector(Shape{1, 2}, std::vector<float>{1000.0f, -1000.0f});
  SoftmaxCrossEntropy loss;
  EXPECT_NEAR(loss.forward(logits, labels_of({1})), 2000.0f, 1e-2);
  EXPECT_TRUE(std::isfinite(loss.backward().to_vector()[0]));
}

TEST(SoftmaxCrossEntropy, GradientMatchesFiniteDifferences) {
  Tensor logits = test::random_tensor(Shape{4, 5}, 1, -3.0f, 3.0f);
  const Tensor labels = labels_of({0, 4, 2, 2});
  SoftmaxCrossEntropy loss;
  loss.forward(logits, labels);
  const std::vector<float> analytic = loss.backward().to_vector();
  SoftmaxCrossEntropy probe;
  test::GradCheckOptions opt;
  opt.step = 1e-3;  // the loss is smooth; a smaller step keeps the curvature error down
  test::check_gradient([&] { return double(probe.forward(logits, labels)); }, std::span<float>(logits.f32(), 20),
                       analytic, "logits", opt);
}

TEST(SoftmaxCrossEntropy, RejectsLabelsOutOfRange) {
  SoftmaxCrossEntropy loss;
  EXPECT_THROW(loss.forward(Tensor::zeros(Shape{2, 3}), labels_of({0, 3})), ArgumentError);
  EXPECT_THROW(loss.forward(Tensor::zeros(Shape{2, 3}), labels_of({0, -1})), ArgumentError);
  EXPECT_THROW(loss.forward(Tensor::zeros(Shape{2, 3}), labels_of({0})), ShapeError);
}

TEST(Accuracy, CountsArgmaxMatches) {
  const Tensor logits =
      Tensor::from_vector(Shape{3, 3}, std::vector<float>{0.1f, 0.9f, 0.0f, 2.0f, 1.0f, 0.0f, 0.0f, 0.0f, 5.0f});
  EXPECT_EQ(count_correct(logits, labels_of({1, 0, 0})), 2);
}

TEST(MetricSums, AccumulateTheSameLossAndAccuracyAsTheReturningForward) {
  const Tensor a = test::random_tensor(Shape{6, 4}, 2, -2.0f, 2.0f),
               b = test::random_tensor(Shape{3, 4}, 3, -2.0f, 2.0f);
  const Tensor la = labels_of({0, 1, 2, 3, 0, 1}), lb = labels_of({3, 3, 2});
  SoftmaxCrossEntropy ref, acc;
  const double expected = double(ref.forward(a, la)) * 6 + double(ref.forward(b, lb)) * 3;
  const int64_t correct = count_correct(a, la) + count_correct(b, lb);
  MetricSums sums;
  acc.forward(a, la, sums);
  acc.forward(b, lb, sums);
  // The returned means are floats (rounded to 2^-24 relative); the sums keep the double loss
  // sum unrounded. 1e-6 relative is 16x that rounding and far below a lost or doubled batch.
  EXPECT_NEAR(sums.read().loss_sum, expected, 1e-6 * expected);
  EXPECT_EQ(sums.read().correct, correct);
  EXPECT_EQ(acc.backward().shape(), (Shape{3, 4}));  // backward() belongs to the last batch
  sums.reset();
  EXPECT_EQ(sums.read().loss_sum, 0.0);
  EXPECT_EQ(sums.read().correct, 0);
  EXPECT_THROW(acc.forward(a, labels_of({0, 1, 2, 9, 0, 1}), sums), ArgumentError);
}

// What a training step calls: forward then backward in one call. On the CPU the fused-loss switch
// changes nothing (it selects a GPU kernel); for every loss the result is forward + backward's.
TEST(SoftmaxCrossEntropy, ForwardBackwardIsForwardThenBackwardWhateverTheSwitch) {
  const Tensor z = test::random_tensor(Shape{37, 10}, 12, -5.0f, 5.0f);
  Tensor y = Tensor::empty(Shape{37}, DType::I32);
  for (int i = 0; i < 37; ++i) y.data<int32_t>()[i] = (i * 3) % 10;
  SoftmaxCrossEntropy two;
  MetricSums s2;
  two.forward(z, y, s2);
  const std::vector<float> d2 = two.backward(90).to_vector();
  for (const bool fused : {false, true}) {
    set_fused_loss(fused);
    SoftmaxCrossEntropy one;
    MetricSums s1;
    const std::vector<float> d1 = one.forward_backward(z, y, s1, 90).to_vector();
    EXPECT_EQ(d1, d2);
    EXPECT_EQ(one.probabilities().to_vector(), two.probabilities().to_vector());
    EXPECT_EQ(s1.read().loss_sum, s2.read().loss_sum);
    EXPECT_EQ(s1.read().correct, s2.read().correct);
  }
  set_fused_loss(false);
  losses::MeanSquaredError mse, mse2;
  const Tensor t = test::random_tensor(Shape{37, 10}, 13);
  MetricSums a, b;
  mse2.forward(z, t, b);
  EXPECT_EQ(mse.forward_backward(z, t, a, 74).to_vector(), mse2.backward(74).to_vector());
  EXPECT_EQ(a.read().loss_sum, b.read().loss_sum);
}

// A subclass of the built-in loss that overrides forward() still sees it called in training
// (forward_backward's one-pass path is the built-in class's own).
TEST(SoftmaxCrossEntropy, ASubclassOverridingForwardIsCalledByForwardBackward) {
  struct Counting : SoftmaxCrossEntropy {
    int forwards = 0;
    using SoftmaxCrossEntropy::forward;
    void forward(const Tensor& z, const Tensor& y, MetricSums& sums) override {
      ++forwards;
      SoftmaxCrossEntropy::forward(z, y, sums);
    }
  };
  const Tensor z = test::random_tensor(Shape{8, 10}, 3);
  Tensor y = Tensor::zeros(Shape{8}, DType::I32);
  Counting loss;
  MetricSums sums;
  for (const bool fused : {false, true}) {
    set_fused_loss(fused);
    (void)loss.forward_backward(z, y, sums, 8);
  }
  set_fused_loss(false);
  EXPECT_EQ(loss.forwards, 2);
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// A sequence's (N, T, K) logits and (N, T) labels: each sample's loss is its T steps' mean, so the
// batch's mean equals the mean over the N * T rows (to double rounding: the sums divide in another
// order), and the gradient is the rows' own, bit for bit (both divide by N * T).
TEST(SparseCategoricalCrossentropy, ASequenceIsTheMeanOverEveryStep) {
  const Tensor logits = test::random_tensor(Shape{3, 5, 7}, 21, -2.0f, 2.0f);
  Tensor labels = Tensor::empty(Shape{3, 5}, DType::I32);
  for (int64_t i = 0; i < 15; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>((i * 3) % 7);
  losses::SparseCategoricalCrossentropy seq, flat;
  const Tensor rows = logits.reshape(Shape{15, 7}).clone(), row_labels = labels.reshape(Shape{15}).clone();
  EXPECT_NEAR(seq.value(logits, labels), flat.value(rows, row_labels), 1e-6);
  MetricSums s(Device::cpu()), f(Device::cpu());
  const std::vector<float> d_seq = seq.forward_backward(logits, labels, s).to_vector();
  EXPECT_EQ(d_seq, flat.forward_backward(rows, row_labels, f).to_vector());
  EXPECT_EQ(seq.forward_backward(logits, labels, s).shape(), logits.shape());
  EXPECT_DOUBLE_EQ(s.read().loss_sum / 2, f.read().loss_sum / 5);  // two batches' sum over steps vs rows
  EXPECT_EQ(s.read().correct, 2 * f.read().correct);               // the correct count is per step
  Tensor bad = labels.clone();
  bad.data<int32_t>()[14] = 7;
  EXPECT_THROW(seq.check_targets(bad, Shape{5, 7}), ArgumentError);
  EXPECT_THROW(seq.check(Shape{5, 7}, DType::I32, Shape{4}), ShapeError);
  EXPECT_NO_THROW(seq.check(Shape{5, 7}, DType::I32, Shape{5}));
}

// A per-step model (Embedding, Dense over the vocabulary) on a text's windows: fit's and evaluate's
// loss is the mean over every position, its accuracy the fraction of correct steps, as computed
// here from predict's logits.
TEST(SparseCategoricalCrossentropy, APerStepModelReportsTheMeanOverPositions) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < 97; ++i) tokens.push_back((i * 5 + i / 3) % 6);
  const SequenceDataset text(tokens, 8);
  const Dataset windows = text.eval_dataset();
  SymbolicTensor in = Input(Shape{8}, "ids");
  Model m(in, layer<Dense>(6)(layer<Embedding>(6, 5)(in)), "per_step");
  m.build(4);
  m.compile(std::make_unique<Adam>(), std::make_unique<losses::SparseCategoricalCrossentropy>(),
            {std::make_shared<metrics::SparseCategoricalAccuracy>()});
  m.fit(windows, {.epochs = 2, .batch_size = 4, .verbose = 0});
  const EvalResult r = m.evaluate(windows, 5);
  const SequenceBatch all = text.eval_windows();
  const Tensor z = m.predict(all.x);
  double loss = 0, correct = 0;
  const int64_t rows = z.numel() / 6;
  for (int64_t p = 0; p < rows; ++p) {
    const float* zp = z.f32() + p * 6;
    const int32_t y = all.y.data<int32_t>()[p];
    double sum = 0;
    int64_t best = 0;
    for (int k = 0; k < 6; ++k) {
      sum += std::exp(double(zp[k]) - zp[0]);
      if (zp[k] > zp[best]) best = k;
    }
    loss += std::log(sum) - (double(zp[y]) - zp[0]);
    correct += best == y;
  }
  EXPECT_EQ(r.samples, text.num_eval_windows());
  EXPECT_NEAR(r.loss, loss / double(rows), 1e-5);  // float logits, double sums: ~1e-7 apart
  EXPECT_NEAR(r.accuracy, correct / double(rows), 1e-12);
}

}  // namespace
}  // namespace ember
