// Inference passes free as they go (layers/model/model.h, run_layers): evaluate and predict give
// the same numbers as a forward that keeps every buffer, an activation lives only until its last
// reader has run (counted in bytes with host_memory_stats), a training step after an inference
// pass is the same step, and backward after one is an Error that says why.
#include <gtest/gtest.h>

#include "test_util.h"

namespace ember {
namespace {

constexpr int64_t kWidth = 256, kLayers = 8, kClasses = 10;

// A stack of Dense(256, ReLU) layers: every activation the same size, none read twice.
Model dense_chain() {
  SymbolicTensor x = Input(Shape{32}, "x");
  SymbolicTensor h = x;
  for (int64_t i = 0; i < kLayers; ++i) h = layer<Dense>(kWidth, Activation::ReLU)(h);
  return Model(x, layer<Dense>(kClasses)(h), "chain");
}

// Every kind of buffer holder: a Conv2D -> MaxPool2D pair that fuses on the CPU, a residual Add,
// BatchNormalization, a Concatenate, GlobalAvgPool2D, Flatten's view, two outputs.
Model graph_model() {
  SymbolicTensor x = Input(Shape{3, 14, 14}, "image");
  // The pair fuses where the convolution reads the model's input (no input gradient wanted).
  SymbolicTensor h = layer<MaxPool2D>(Size2{2, 2})(layer<Conv2D>(8, Size2{3, 3}, Activation::ReLU)(x));
  SymbolicTensor r = layer<BatchNormalization>()(layer<Conv2D>(8, Size2{3, 3}, Activation::None, Padding::Same)(h));
  SymbolicTensor s = layer<ReLU>()(add({h, r}));
  SymbolicTensor p = layer<MaxPool2D>(Size2{2, 2})(layer<Conv2D>(8, Size2{3, 3}, Activation::ReLU)(s));
  SymbolicTensor g = layer<GlobalAvgPool2D>()(s);
  SymbolicTensor both = concatenate({layer<Flatten>()(p), g});
  SymbolicTensor a = layer<Dense>(kClasses)(both);
  SymbolicTensor b = layer<Dense>(2)(layer<Dense>(6, Activation::ReLU)(both));
  return Model({x}, {a, b}, "graph");
}

std::vector<OutputLoss> two_losses() {
  std::vector<OutputLoss> out;
  out.push_back({.loss = std::make_unique<losses::SparseCategoricalCrossentropy>(), .weight = 1.0, .metrics = {}});
  out.push_back({.loss = std::make_unique<losses::MeanSquaredError>(), .weight = 0.5, .metrics = {}});
  return out;
}

size_t in_use() { return host_memory_stats().in_use; }

TEST(InferenceMemory, AnActivationLivesUntilItsLastReader) {
  Model m = dense_chain();
  const int64_t n = 64;
  m.build(n);
  const Tensor x = test::random_tensor(Shape{n, 32}, 3);
  const size_t activation = n * kWidth * sizeof(float), output = n * kClasses * sizeof(float);
  Tensor warm = m.predict(x, n);  // the first pass's one-time buffers (none expected, but not counted)
  warm = Tensor();
  const size_t before = in_use();  // the parameters etc. and the last pass's output, held by the model
  reset_host_memory_peak();
  const Tensor p = m.predict(x, n);
  // predict's result (`output` bytes) is made first; the pass then drops the last pass's output
  // and runs the layers: layer i's output is made while layer i - 1's is still read, and freed
  // once layer i has run. So exactly two activations at a time, and nothing else.
  EXPECT_EQ(host_memory_stats().peak_in_use - before, 2 * activation);
  // What stays: the result and the model's copy of this pass's output (the last one's was freed).
  EXPECT_EQ(in_use() - before, output);
  // A forward that keeps its buffers (for a backward) holds every activation.
  const Tensor& kept = m.forward(x, false);
  EXPECT_EQ(in_use() - before, output + kLayers * activation);
  // The same numbers both ways, bit for bit.
  EXPECT_EQ(kept.to_vector(), p.to_vector());
}

TEST(InferenceMemory, AGraphModelFreesEverythingButItsOutputs) {
  Model m = graph_model();
  const int64_t n = 16;
  m.build(n);
  m.compile(std::make_unique<Adam>(), two_losses());
  const std::vector<Tensor> xs{test::random_tensor(Shape{n, 3, 14, 14}, 4)};
  const std::vector<Tensor> ys{test::cycling_labels(n, kClasses), test::random_tensor(Shape{n, 2}, 5)};
  bool fused = false;
  for (size_t i = 0; i < m.layers().size(); ++i) fused = fused || m.fused_with_next(i);
  ASSERT_TRUE(fused) << "the test wants a fused Conv2D -> MaxPool2D pair";

  // Reference: a training step, then the outputs of a forward that keeps its buffers.
  MetricSums sums = m.make_sums();
  m.train_step(xs, ys, sums);
  m.forward(xs, false);
  const std::vector<float> digit = m.output(0).to_vector(), size = m.output(1).to_vector();

  std::vector<Tensor> outs = m.predict_outputs(xs, n);
  EXPECT_EQ(outs[0].to_vector(), digit);
  EXPECT_EQ(outs[1].to_vector(), size);
  outs.clear();
  // After predict the layers hold nothing of the pass, only the model its outputs: what predict
  // leaves behind grows with the batch by the outputs' bytes alone (every layer's buffers, the
  // training step's included, would grow too).
  const int64_t big = 4 * n;
  const std::vector<Tensor> big_xs{test::random_tensor(Shape{big, 3, 14, 14}, 8)};
  m.predict_outputs(big_xs, big);  // the backends' per-shape plans for this batch (kept, a few bytes)
  m.predict_outputs(xs, n);
  const size_t after_small = in_use();
  m.predict_outputs(big_xs, big);
  EXPECT_EQ(in_use() - after_small, static_cast<size_t>(big - n) * (kClasses + 2) * sizeof(float));

  // evaluate frees as predict does and gives each output's loss sum that the keeping path gives,
  // bit for bit.
  MetricSums eval = m.make_sums();
  m.evaluate_batch(xs, ys, eval);
  const MetricSums::Values v = eval.read();
  EXPECT_EQ(m.output(0).to_vector(), digit);
  MetricSums kept = m.make_sums();
  losses::SparseCategoricalCrossentropy digit_loss;
  losses::MeanSquaredError size_loss;
  m.forward(xs, false);
  digit_loss.forward(m.output(0), ys[0], kept.block(0));
  size_loss.forward(m.output(1), ys[1], kept.block(1));
  for (size_t k = 0; k < 2; ++k)
    EXPECT_EQ(eval.block(k).buffer().data<double>()[0], kept.block(k).buffer().data<double>()[0]) << "output " << k;
  // What evaluate leaves grows with the batch by the outputs (12 floats a row) and the sparse
  // cross-entropy's probabilities (10 a row) only (the layers' buffers would add 334,080 bytes
  // here): after a first pass of each size, a small pass after a big one returns to its bytes.
  const std::vector<Tensor> big_ys{test::cycling_labels(big, kClasses), test::random_tensor(Shape{big, 2}, 9)};
  MetricSums scratch = m.make_sums();
  m.evaluate_batch(big_xs, big_ys, scratch);
  m.evaluate_batch(xs, ys, scratch);
  const size_t after_small_eval = in_use();
  m.evaluate_batch(big_xs, big_ys, scratch);
  const size_t grown = in_use() - after_small_eval;
  m.evaluate_batch(xs, ys, scratch);
  EXPECT_EQ(in_use(), after_small_eval);
  EXPECT_EQ(grown, static_cast<size_t>(big - n) * (kClasses + 2 + kClasses) * sizeof(float));

  // A training step after the inference passes is the step it would have been: both models
  // made alike, one of them never ran an inference pass.
  Model twin = graph_model();
  twin.build(n);
  twin.compile(std::make_unique<Adam>(), two_losses());
  twin.params().copy_from(m.params());
  twin.state().copy_from(m.state());
  MetricSums a = m.make_sums(), b = twin.make_sums();
  m.compute_gradients(xs, ys, a);
  twin.compute_gradients(xs, ys, b);
  EXPECT_EQ(m.grads().to_vector(), twin.grads().to_vector());
  EXPECT_EQ(a.read().loss_sum, b.read().loss_sum);
  EXPECT_TRUE(std::isfinite(v.loss_sum));
}

// A final Softmax that evaluate runs only for a metric reading the model's output (the loss reads
// its input): its output moves to the model like every other layer's, so output(0) after evaluate
// is that pass's probabilities, never a freed buffer (a Softmax dropping its buffers left the
// model pointing at them).
TEST(InferenceMemory, AFinalSoftmaxRunForAMetricHandsOnItsOutput) {
  Sequential m;
  m.add<Dense>(kClasses);
  m.add<Softmax>();
  m.build(Shape{32}, 1);
  m.compile(std::make_unique<Adam>(), std::make_unique<losses::CategoricalCrossentropy>(),
            {std::make_shared<metrics::MeanAbsoluteError>()});
  const int64_t n = 8;
  const Tensor x = test::random_tensor(Shape{n, 32}, 4);
  Tensor onehot = Tensor::zeros(Shape{n, kClasses}, DType::F32);
  for (int64_t i = 0; i < n; ++i) onehot.f32()[i * kClasses + (i % kClasses)] = 1.0f;
  const std::vector<float> probs = m.forward(x, false).to_vector();
  MetricSums sums = m.make_sums();
  m.evaluate_batch(x, onehot, sums);
  EXPECT_EQ(m.output(0).to_vector(), probs);
  // Its mean absolute error is of these probabilities (a row's |p - onehot| over its 10 values),
  // summed in double: 80 terms below 1.5 regrouped, at most 80 x 2^-52 x 1.5 = 2.7e-14 apart
  // (measured 2.2e-16).
  double mae = 0;
  for (int64_t i = 0; i < n * kClasses; ++i) mae += std::abs(double(probs[size_t(i)]) - onehot.f32()[i]);
  EXPECT_NEAR(sums.read().metrics.at(0), mae / kClasses, 2.7e-14);
}

TEST(InferenceMemory, BackwardAfterAnInferencePassSaysWhy) {
  Model m = dense_chain();
  const int64_t n = 8;
  m.build(n);
  const Tensor x = test::random_tensor(Shape{n, 32}, 6);
  const Tensor dy = test::random_tensor(Shape{n, kClasses}, 7);
  // After a keeping forward in inference mode backward works (an input's gradient, say).
  m.forward(x, false);
  EXPECT_NO_THROW(m.backward(dy));
  m.predict(x, n);
  try {
    m.backward(dy);
    FAIL() << "backward after predict ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("inference pass"), std::string::npos) << e.what();
  }
  m.forward(x, true);  // a new forward makes the buffers again
  EXPECT_NO_THROW(m.backward(dy));
}

}  // namespace
}  // namespace ember
