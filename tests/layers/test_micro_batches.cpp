// CPU micro-batches (Sequential::set_cpu_micro_batch): a batch larger than a slice runs slice
// by slice with the same meaning (gradients summed, the loss a mean over the whole batch), only
// for models whose layers keep rows independent, and deterministically.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "apps/model_zoo.h"
#include "core/pairwise_sum.h"
#include "test_util.h"

namespace ember {
namespace {

constexpr int64_t kRows = 150;  // two full slices of 64 and a short one of 22

Sequential reference_model(int64_t micro_batch) {
  Sequential m;
  apps::add_reference_cnn(m);
  m.build(Shape{1, 28, 28}, 11);
  m.set_cpu_micro_batch(micro_batch);
  return m;
}

struct StepResult {
  std::vector<float> grads;
  MetricSums::Values sums;
};

// The same bits, except where gradual underflow rounds. A share's gradient scaled to the batch by
// a power of two is exact unless the result falls below FLT_MIN (2^-126), where the scaling
// rounds to the subnormal spacing 2^-149; a product that underflows in one order and not in the
// other differs by as much. So the two may differ by at most `terms` x 2^-149, `terms` being the
// most products one gradient element sums (the first convolution's: 64 images x 26 x 26
// positions); a gradient above ~5e-34 (its ulp beyond that bound) must be equal bit for bit.
void expect_equal_but_underflow(const std::vector<float>& got, const std::vector<float>& want,
                                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  const double bound = 64.0 * 26 * 26 * std::ldexp(1.0, -149);
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    EXPECT_LE(std::abs(double(got[i]) - double(want[i])), bound)
        << what << ": gradient " << i << " is " << got[i] << ", the whole batch's " << want[i];
  }
}

StepResult gradients_of(Sequential& m, const Tensor& x, const Tensor& y) {
  MetricSums sums(Device::cpu());
  m.compute_gradients(x, y, sums);
  return {m.grads().to_vector(), sums.read()};
}

TEST(MicroBatches, ASlicedStepMeansWhatTheWholeBatchMeans) {
  const Tensor x = test::random_tensor(Shape{kRows, 1, 28, 28}, 5, 0.0f, 1.0f), y = test::cycling_labels(kRows, 10);
  Sequential whole = reference_model(0), sliced = reference_model(64);
  EXPECT_EQ(sliced.cpu_micro_batch(), 64);
  const StepResult a = gradients_of(whole, x, y), b = gradients_of(sliced, x, y);
  // The batch's sum order (core/pairwise_sum.h): every weight gradient sums groups of 16 rows as
  // a pairwise tree, and slices of 64 rows (4 groups; the last one 22: a group and 6 rows) are the
  // whole batch's subtrees, so the same bits. Were the slices' means not rescaled to the batch's
  // mean, the error would be ~1 (150/64 times too large); were a slice's groups summed in
  // another order, rounding (~1e-7).
  expect_equal_but_underflow(b.grads, a.grads, "slices of 64");
  // The same per-row losses (the same logits' bits), summed in double in two groupings: each sum
  // within (kRows - 1) 2^-53 of the exact one, so the two within twice that.
  EXPECT_NEAR(b.sums.loss_sum, a.sums.loss_sum, 2 * kRows * std::ldexp(a.sums.loss_sum, -53));
  EXPECT_EQ(b.sums.correct, a.sums.correct);
  EXPECT_EQ(b.sums.finite_batches, 1);  // one batch however many slices
  EXPECT_EQ(a.sums.finite_batches, 1);

  // The float-returning step is the same step.
  int64_t correct = -1;
  const float loss = sliced.compute_gradients(x, y, &correct);
  EXPECT_EQ(sliced.grads().to_vector(), b.grads);
  EXPECT_FLOAT_EQ(loss, static_cast<float>(b.sums.loss_sum / kRows));
  EXPECT_EQ(correct, b.sums.correct);
}

TEST(MicroBatches, SlicedTrainingIsTheSameBitsEveryRun) {
  const Tensor x = test::random_tensor(Shape{kRows, 1, 28, 28}, 6, 0.0f, 1.0f), y = test::cycling_labels(kRows, 10);
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    Sequential m = reference_model(64);
    m.compile(std::make_unique<Adam>());
    MetricSums sums(Device::cpu());
    for (int step = 0; step < 3; ++step) m.train_step(x, y, sums);
    if (run == 0)
      first = m.params().to_vector();
    else
      EXPECT_EQ(m.params().to_vector(), first);
  }
}

TEST(MicroBatches, EvaluationAndPredictionAreSlicedToo) {
  const Tensor x = test::random_tensor(Shape{kRows, 1, 28, 28}, 7, 0.0f, 1.0f), y = test::cycling_labels(kRows, 10);
  Sequential whole = reference_model(0), sliced = reference_model(64);
  MetricSums a(Device::cpu()), b(Device::cpu());
  whole.evaluate_batch(x, y, a);
  sliced.evaluate_batch(x, y, b);
  const MetricSums::Values va = a.read(), vb = b.read();
  EXPECT_NEAR(vb.loss_sum, va.loss_sum, 1e-6 * va.loss_sum);  // per-row losses, summed in double
  EXPECT_EQ(vb.correct, va.correct);
  EXPECT_EQ(vb.finite_batches, 1);
  // Rows are computed alone: whichever kernel oneDNN picks for a batch size, each logit is the
  // same dot products (up to their own order, ~1e-6 of the logits' scale).
  EXPECT_LT(test::scaled_error(sliced.predict(x, 150).to_vector(), whole.predict(x, 150).to_vector()), 1e-5);
}

TEST(MicroBatches, ModelsThatMixRowsInTrainingRunWholeBatches) {
  const Tensor x = test::random_tensor(Shape{kRows, 1, 28, 28}, 8, 0.0f, 1.0f), y = test::cycling_labels(kRows, 10);
  for (int which = 0; which < 2; ++which) {
    auto make = [&](int64_t micro_batch) {
      Sequential m;
      m.add<Conv2D>(8, Size2{3, 3}, Activation::ReLU);
      if (which == 0)
        m.add<BatchNormalization>();
      else
        m.add<Dropout>(0.3f);
      m.add<Flatten>();
      m.add<Dense>(10);
      m.build(Shape{1, 28, 28}, 12);
      m.set_cpu_micro_batch(micro_batch);
      return m;
    };
    Sequential whole = make(0), sliced = make(64);
    EXPECT_FALSE(sliced.layers()[1]->rows_independent(true));
    EXPECT_TRUE(sliced.layers()[1]->rows_independent(false));
    // Batch statistics over 150 rows, or Dropout's masks drawn for the whole batch: a slice
    // would change what the step computes, so it runs whole: the same bits as micro-batches off.
    EXPECT_EQ(gradients_of(sliced, x, y).grads, gradients_of(whole, x, y).grads) << which;
  }
}

TEST(MicroBatches, BadArgumentsAreRefused) {
  Sequential m = reference_model(64);
  EXPECT_THROW(m.set_cpu_micro_batch(-1), ArgumentError);
  EXPECT_EQ(m.cpu_micro_batch(), 64);
  const Tensor x = test::random_tensor(Shape{kRows, 1, 28, 28}, 9, 0.0f, 1.0f);
  MetricSums sums(Device::cpu());
  EXPECT_THROW(m.compute_gradients(x, test::cycling_labels(kRows - 1, 10), sums), ShapeError);
  // A bad label in the last slice throws before any slice has added to the sums.
  Tensor bad = test::cycling_labels(kRows, 10);
  bad.data<int32_t>()[kRows - 1] = 10;
  EXPECT_THROW(m.compute_gradients(x, bad, sums), ArgumentError);
  EXPECT_THROW(m.evaluate_batch(x, bad, sums), ArgumentError);
  EXPECT_EQ(sums.read().loss_sum, 0.0);
  EXPECT_EQ(sums.read().finite_batches, 0);
  SoftmaxCrossEntropy loss;
  const Tensor z = test::random_tensor(Shape{4, 10}, 10);
  loss.forward(z, test::cycling_labels(4, 10), sums);
  EXPECT_THROW(loss.backward(3), ArgumentError);  // a mean over fewer rows than given
  // As one slice of a batch of 8: half the gradient of the mean over its own 4 rows.
  const std::vector<float> own = loss.backward().to_vector(), half = loss.backward(8).to_vector();
  for (size_t i = 0; i < own.size(); ++i) EXPECT_FLOAT_EQ(half[i], own[i] * 0.5f);
}

// An unbuilt model whose batches would run in slices says so, as a whole batch does: the slicing
// reads the graph's shapes only after the model is built.
TEST(MicroBatches, AnUnbuiltModelIsRefusedBeforeAnySlice) {
  Sequential m;
  apps::add_reference_cnn(m);
  m.set_cpu_micro_batch(16);
  const Tensor x = test::random_tensor(Shape{64, 1, 28, 28}, 9, 0.0f, 1.0f);
  MetricSums sums(Device::cpu());
  for (const auto& call : {std::function<void()>([&] { m.compute_gradients(x, test::cycling_labels(64, 10), sums); }),
                           std::function<void()>([&] { m.evaluate_batch(x, test::cycling_labels(64, 10), sums); })}) {
    try {
      call();
      ADD_FAILURE() << "an unbuilt model ran a batch";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("build() the model first"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// Model::accumulate_gradients: micro-batches of a power-of-two number of 16-row groups make up the
// batch of 64 bit for bit (above underflow) through the API (their shares scaled by a power of two, added as the
// batch's pairwise tree), on 1 and 2 threads; uneven micro-batches to the order of float sums.
TEST(GradientAccumulation, MicroBatchesEqualTheWholeBatch) {
  const Tensor x = test::random_tensor(Shape{64, 1, 28, 28}, 7, 0.0f, 1.0f), y = test::cycling_labels(64, 10);
  const auto accumulated = [&](std::initializer_list<int64_t> sizes, int threads) {
    Sequential m = reference_model(64);
    m.set_num_threads(threads);
    m.compile(std::make_unique<Adam>());
    MetricSums sums(Device::cpu());
    int64_t begin = 0;
    for (const int64_t rows : sizes) {
      m.accumulate_gradients(x.rows(begin, rows), y.rows(begin, rows), sums, 64);
      begin += rows;
    }
    EXPECT_EQ(m.finish_accumulation(), static_cast<int64_t>(sizes.size()));
    EXPECT_EQ(sums.read().finite_batches, static_cast<int64_t>(sizes.size()));  // each a batch of its own
    return m.grads().to_vector();
  };
  for (const int threads : {1, 2}) {
    Sequential whole = reference_model(64);
    whole.set_num_threads(threads);
    const std::vector<float> want = gradients_of(whole, x, y).grads;
    const std::string on = " on " + std::to_string(threads) + " threads";
    expect_equal_but_underflow(accumulated({16, 16, 16, 16}, threads), want, "16 + 16 + 16 + 16" + on);
    expect_equal_but_underflow(accumulated({32, 32}, threads), want, "32 + 32" + on);
    expect_equal_but_underflow(accumulated({32, 16, 16}, threads), want, "32 + 16 + 16" + on);
    // 20 + 20 + 24 rows: shares of 5/16 and 3/8 (rounded scalings) and groups that straddle the
    // micro-batches: the same sum in another order. 64 terms of at most the scale's size each:
    // within 64 * 2^-24 of the largest gradient.
    EXPECT_LE(test::scaled_error(accumulated({20, 20, 24}, threads), want), 64 * std::ldexp(1.0, -24));
  }
}

// Accumulate, finish, apply: the update of one step on the whole batch, bit for bit; the
// denominator is the caller's; bad uses say what is wrong.
TEST(GradientAccumulation, TheUpdateIsTheWholeBatchsStep) {
  const Tensor x = test::random_tensor(Shape{64, 1, 28, 28}, 8, 0.0f, 1.0f), y = test::cycling_labels(64, 10);
  Sequential whole = reference_model(64), parts = reference_model(64), halved = reference_model(64);
  for (Sequential* m : {&whole, &parts, &halved}) m->compile(std::make_unique<Adam>());
  MetricSums sums(Device::cpu());
  whole.train_step(x, y, sums);
  for (int64_t i = 0; i < 64; i += 16) parts.accumulate_gradients(x.rows(i, 16), y.rows(i, 16), sums, 64);
  parts.finish_accumulation();
  parts.apply_gradients();
  EXPECT_EQ(parts.params().to_vector(), whole.params().to_vector());
  // A denominator of 128 for the same 64 rows: half the gradient, exactly.
  for (int64_t i = 0; i < 64; i += 32) halved.accumulate_gradients(x.rows(i, 32), y.rows(i, 32), sums, 128);
  halved.finish_accumulation();
  const std::vector<float> half = halved.grads().to_vector();
  Sequential again = reference_model(64);
  std::vector<float> full = gradients_of(again, x, y).grads;
  for (float& v : full) v *= 0.5f;
  // Equal, except that halving a subnormal value (below 2^-126) rounds: there within its last bit.
  ASSERT_EQ(half.size(), full.size());
  for (size_t i = 0; i < half.size(); ++i) {
    if (std::abs(full[i]) >= std::numeric_limits<float>::min())
      ASSERT_EQ(half[i], full[i]) << i;
    else
      ASSERT_LE(std::abs(half[i] - full[i]), std::numeric_limits<float>::denorm_min()) << i;
  }
  EXPECT_THROW(halved.finish_accumulation(), ArgumentError);  // nothing accumulated since
  EXPECT_THROW(halved.accumulate_gradients(x, y, sums, 0), ArgumentError);
}

// Parts of levels that never pair up (16 and 32 rows alternating: not aligned) stay a bounded stack:
// a larger part counts at the level below it.
TEST(GradientAccumulation, UnalignedPartsKeepTheTreeBounded) {
  PairwiseTree tree;
  std::vector<double> slots(80, 0.0);
  double total = 0;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_LT(tree.next_slot(), 64);
    slots[size_t(tree.next_slot())] = i;
    total += i;
    tree.push([&](int64_t into, int64_t from) { slots[size_t(into)] += slots[size_t(from)]; }, i % 2);
  }
  tree.finish([&](int64_t into, int64_t from) { slots[size_t(into)] += slots[size_t(from)]; });
  EXPECT_EQ(slots[0], total);
}

}  // namespace
}  // namespace ember
