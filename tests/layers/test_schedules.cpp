// Learning-rate schedules and early stopping (FitOptions): the rates per epoch against their
// formulas, what fit hands the optimizer, a resumed run's rates, and early stopping's patience,
// min_delta and restored weights.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "test_util.h"

namespace ember {
namespace {

using Kind = LearningRateSchedule::Kind;

TEST(LearningRateSchedule, RatesFollowTheirFormulas) {
  const LearningRateSchedule step{.kind = Kind::Step, .initial = 0.1f, .decay = 0.5f, .decay_epochs = 3};
  EXPECT_FLOAT_EQ(step.rate(0), 0.1f);
  EXPECT_FLOAT_EQ(step.rate(2), 0.1f);
  EXPECT_FLOAT_EQ(step.rate(3), 0.05f);
  EXPECT_FLOAT_EQ(step.rate(7), 0.025f);
  const LearningRateSchedule exp{.kind = Kind::Exponential, .initial = 0.1f, .decay = 0.9f, .decay_epochs = 2};
  EXPECT_FLOAT_EQ(exp.rate(0), 0.1f);
  EXPECT_FLOAT_EQ(exp.rate(1), static_cast<float>(0.1 * std::pow(0.9, 0.5)));
  EXPECT_FLOAT_EQ(exp.rate(4), static_cast<float>(0.1 * 0.81));
  const LearningRateSchedule cos{.kind = Kind::Cosine, .initial = 0.2f, .decay = 0.1f, .decay_epochs = 4};
  EXPECT_FLOAT_EQ(cos.rate(0), 0.2f);
  EXPECT_FLOAT_EQ(cos.rate(2), static_cast<float>(0.2 * (0.9 * 0.5 + 0.1)));  // half way
  EXPECT_FLOAT_EQ(cos.rate(4), 0.02f);                                        // the floor: alpha * initial
  EXPECT_FLOAT_EQ(cos.rate(9), 0.02f);                                        // and flat after
  EXPECT_FLOAT_EQ(LearningRateSchedule{.initial = 0.3f}.rate(5), 0.3f);       // constant
}

TEST(LearningRateSchedule, RejectsSchedulesThatMakeNoSense) {
  EXPECT_THROW((LearningRateSchedule{.kind = Kind::Step, .decay = 0.0f}.validate()), ArgumentError);
  EXPECT_THROW((LearningRateSchedule{.kind = Kind::Exponential, .decay = 1.5f}.validate()), ArgumentError);
  EXPECT_THROW((LearningRateSchedule{.kind = Kind::Cosine, .decay_epochs = 0}.validate()), ArgumentError);
  EXPECT_THROW((LearningRateSchedule{.initial = -1.0f}.validate()), ArgumentError);
  EXPECT_NO_THROW((LearningRateSchedule{.kind = Kind::Cosine, .decay = 0.0f}.validate()));
}

Dataset blobs(int64_t n, uint64_t seed) {  // two classes: dark or bright 4x4 images, noisy
  Tensor images = Tensor::zeros(Shape{n, 1, 4, 4}, DType::U8);
  Tensor labels = Tensor::zeros(Shape{n}, DType::I32);
  Rng rng(seed);
  for (int64_t i = 0; i < n; ++i) {
    const int label = static_cast<int>(rng.below(2));
    labels.data<int32_t>()[i] = label;
    for (int j = 0; j < 16; ++j)
      images.data<uint8_t>()[i * 16 + j] = static_cast<uint8_t>(rng.below(120) + (label ? 100 : 0));
  }
  return Dataset(images, labels, 2);
}

std::unique_ptr<Sequential> small_model(float lr = 1e-2f) {
  auto m = std::make_unique<Sequential>();
  m->add<Flatten>();
  m->add<Dense>(8, Activation::ReLU);
  m->add<Dense>(2);
  m->build(Shape{1, 4, 4}, 1);
  m->compile(std::make_unique<Adam>(AdamOptions{.learning_rate = lr}));
  return m;
}

TEST(LearningRateSchedule, FitSetsEachEpochsRateAndAResumedRunGetsTheSameRates) {
  const Dataset data = blobs(64, 1);
  const LearningRateSchedule s{.kind = Kind::Step, .initial = 0.02f, .decay = 0.5f, .decay_epochs = 2};
  FitOptions opt{.epochs = 5, .batch_size = 16, .verbose = 0};
  opt.learning_rate_schedule = s;
  auto m = small_model();
  const History h = m->fit(data, opt);
  ASSERT_EQ(h.epochs.size(), 5u);
  for (int e = 0; e < 5; ++e) EXPECT_FLOAT_EQ(static_cast<float>(h.epochs[e].learning_rate), s.rate(e)) << e;
  EXPECT_FLOAT_EQ(m->optimizer()->learning_rate(), 0.005f);
  // Resumed at epoch 3: epoch 3 gets rate(3), not the schedule's start.
  auto r = small_model();
  opt.initial_epoch = 3;
  const History hr = r->fit(data, opt);
  ASSERT_EQ(hr.epochs.size(), 2u);
  EXPECT_FLOAT_EQ(static_cast<float>(hr.epochs[0].learning_rate), s.rate(3));
}

TEST(LearningRateSchedule, AWarmUpRisesLinearlyThenAStepwiseCosineRunsPerStep) {
  const LearningRateSchedule s{
      .kind = Kind::Cosine, .initial = 0.1f, .decay = 0.0f, .decay_epochs = 2, .warmup_steps = 4};
  EXPECT_TRUE(s.stepwise());
  // Steps 0..3: (k + 1) / 4 of the cosine's rate at that point; then the cosine itself.
  for (int k = 0; k < 4; ++k)
    EXPECT_FLOAT_EQ(s.rate_at(0.1 * k, k),
                    static_cast<float>(0.1 * 0.5 * (1 + std::cos(std::numbers::pi * 0.1 * k / 2)) * (k + 1) / 4));
  EXPECT_FLOAT_EQ(s.rate_at(0.5, 4), static_cast<float>(0.1 * 0.5 * (1 + std::cos(std::numbers::pi * 0.25))));
  EXPECT_FLOAT_EQ(s.rate_at(2.0, 100), 0.0f);
  EXPECT_THROW((LearningRateSchedule{.warmup_steps = -1}.validate()), ArgumentError);
}

// fit sets a stepwise rate before every step; on_batch_end sees each step's rate, the optimizer's
// count and the epoch's running loss, and can stop the fit; a resumed run continues the warm-up.
TEST(LearningRateSchedule, FitRunsAWarmUpStepByStepAndCallsBackAfterEachStep) {
  const Dataset data = blobs(64, 2);  // 4 batches of 16 per epoch
  const LearningRateSchedule s{
      .kind = Kind::Cosine, .initial = 0.02f, .decay = 0.0f, .decay_epochs = 2, .warmup_steps = 6};
  FitOptions opt{.epochs = 2, .batch_size = 16, .verbose = 0};
  opt.learning_rate_schedule = s;
  std::vector<BatchLogs> seen;
  opt.on_batch_end = [&](const BatchLogs& b) {
    seen.push_back(b);
    return true;
  };
  auto m = small_model();
  const History h = m->fit(data, opt);
  ASSERT_EQ(seen.size(), 8u);
  for (size_t i = 0; i < seen.size(); ++i) {
    const int epoch = static_cast<int>(i / 4), batch = static_cast<int>(i % 4);
    EXPECT_EQ(seen[i].epoch, epoch + 1);
    EXPECT_EQ(seen[i].batch, batch + 1);
    EXPECT_EQ(seen[i].step, static_cast<int64_t>(i) + 1);  // the optimizer's count after the step
    EXPECT_FLOAT_EQ(static_cast<float>(seen[i].learning_rate), s.rate_at(epoch + batch / 4.0, static_cast<int64_t>(i)));
  }
  EXPECT_LT(seen[1].learning_rate, seen[4].learning_rate);  // rising during the warm-up
  EXPECT_DOUBLE_EQ(seen[3].loss, h.epochs[0].loss);         // the running mean at the epoch's end
  ASSERT_EQ(seen[3].metrics.size(), 1u);
  EXPECT_DOUBLE_EQ(seen[3].metrics[0].second, h.epochs[0].accuracy);

  // Stopping from the callback: after the 3rd step, as a stop request.
  FitOptions stop = opt;
  stop.on_batch_end = [](const BatchLogs& b) { return b.step < 3; };
  auto m2 = small_model();
  const History hs = m2->fit(data, stop);
  EXPECT_TRUE(hs.stopped);
  EXPECT_EQ(hs.stop_batch, 3);
  // Resumed from there (the optimizer's count carries the warm-up): the 4th step's rate.
  std::vector<double> rates;
  stop.on_batch_end = [&](const BatchLogs& b) {
    rates.push_back(b.learning_rate);
    return true;
  };
  stop.initial_batch = 3;
  m2->fit(data, stop);
  ASSERT_FALSE(rates.empty());
  EXPECT_FLOAT_EQ(static_cast<float>(rates[0]), s.rate_at(0.75, 3));
}

TEST(EarlyStopping, StopsAfterPatienceAndRestoresTheBestWeights) {
  // Validation labels are the training labels flipped: the better the model learns, the worse its
  // val_loss, so epoch 1 is the best and, with patience 2, epoch 3 the last.
  const Dataset train = blobs(64, 1);
  Tensor flipped = train.labels().clone();
  for (int64_t i = 0; i < flipped.numel(); ++i) flipped.data<int32_t>()[i] = 1 - flipped.data<int32_t>()[i];
  const Dataset val(train.images(), flipped, 2);
  auto m = small_model(1e-2f);
  FitOptions opt{.epochs = 20, .batch_size = 8, .seed = 2, .verbose = 0};
  opt.early_stopping = EarlyStopping{.patience = 2};
  std::vector<std::vector<float>> params_after;  // each epoch's weights, as on_epoch_end sees them
  opt.on_epoch_end = [&](const EpochLogs&) {
    params_after.push_back(m->params().to_vector());
    return true;
  };
  const History h = m->fit(train, opt, &val);
  ASSERT_TRUE(h.stopped_early);
  ASSERT_EQ(h.epochs.size(), 3u);
  ASSERT_EQ(params_after.size(), 3u);
  EXPECT_GT(*h.epochs[1].val_loss, *h.epochs[0].val_loss);
  EXPECT_EQ(h.best_epoch, 1);
  EXPECT_EQ(h.best_val_loss, *h.epochs[0].val_loss);
  EXPECT_NE(params_after[2], params_after[0]);
  EXPECT_EQ(m->params().to_vector(), params_after[0]);  // epoch 1's weights, restored
  EXPECT_NEAR(m->evaluate(val).loss, h.best_val_loss, 1e-6 * h.best_val_loss);
  // Without restore_best_weights the last epoch's weights stay.
  auto keep = small_model(1e-2f);
  opt.early_stopping->restore_best_weights = false;
  params_after.clear();
  opt.on_epoch_end = [&](const EpochLogs&) {
    params_after.push_back(keep->params().to_vector());
    return true;
  };
  keep->fit(train, opt, &val);
  ASSERT_EQ(params_after.size(), 3u);
  EXPECT_EQ(keep->params().to_vector(), params_after[2]);
}

TEST(EarlyStopping, MinDeltaCountsSmallGainsAsNoneAndValidationIsRequired) {
  const Dataset train = blobs(64, 1), val = blobs(64, 2);
  auto m = small_model(1e-3f);
  FitOptions opt{.epochs = 10, .batch_size = 16, .verbose = 0};
  opt.early_stopping = EarlyStopping{.patience = 0, .min_delta = 100.0};  // nothing improves by 100
  const History h = m->fit(train, opt, &val);
  EXPECT_TRUE(h.stopped_early);
  EXPECT_EQ(h.epochs.size(), 2u);  // epoch 1 is the first best; epoch 2 fails to beat it: stop
  EXPECT_EQ(h.best_epoch, 1);
  EXPECT_THROW(m->fit(train, opt), ArgumentError);  // no validation data
  opt.early_stopping->patience = -1;
  EXPECT_THROW(m->fit(train, opt, &val), ArgumentError);
}

}  // namespace
}  // namespace ember
