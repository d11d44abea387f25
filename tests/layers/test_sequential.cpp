// Sequential: the reference CNN's shapes and parameter count, summary, flat buffers,
// training on a separable synthetic problem, and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "apps/model_zoo.h"
#include "test_util.h"

namespace ember {
namespace {

Sequential reference_cnn() {
  Sequential m;
  apps::add_reference_cnn(m);
  return m;
}

TEST(Sequential, ReferenceCnnHasKerasParameterCount) {
  Sequential m = reference_cnn();
  m.build(Shape{1, 28, 28});
  EXPECT_EQ(m.num_params(), 93322);  // what Keras' model.summary() reports
  EXPECT_EQ(m.output_shape(), Shape{10});
  const std::string s = m.summary();
  EXPECT_NE(s.find("Total params: 93,322"), std::string::npos) << s;
  EXPECT_NE(s.find("conv2d_1 (Conv2D)"), std::string::npos) << s;
  EXPECT_NE(s.find("(None, 64, 3, 3)"), std::string::npos) << s;
  // The named views tile the flat buffer in order, each starting on a 256-byte boundary of it (64
  // floats: cuDNN's and cuBLAS's vectorised kernels want aligned pointers), the gaps zero: 10
  // views, 93,322 values in 93,440 floats (118 of padding, 0.13%).
  int64_t at = 0, values = 0;
  for (const auto& [name, t] : m.named_params()) {
    EXPECT_EQ(at % 64, 0) << name;
    EXPECT_EQ(t.raw(), static_cast<const void*>(m.params().f32() + at)) << name;
    for (int64_t i = at + t.numel(); i < at + Model::aligned_view(t.numel()); ++i)
      ASSERT_EQ(m.params().f32()[i], 0.0f) << "padding after " << name;
    at += Model::aligned_view(t.numel());
    values += t.numel();
  }
  EXPECT_EQ(values, 93322);
  EXPECT_EQ(at, m.params().numel());
  EXPECT_EQ(m.params().numel(), 93440);
  // The optimizers' state in a checkpoint is packed to one value per parameter, and back.
  const Tensor packed = m.pack_params_layout(m.params());
  ASSERT_EQ(packed.numel(), 93322);
  EXPECT_EQ(m.unpack_params_layout(packed).to_vector(), m.params().to_vector());
  EXPECT_THROW(m.pack_params_layout(packed), ShapeError);
  EXPECT_THROW(m.unpack_params_layout(m.params()), ShapeError);
}

TEST(Sequential, ForwardGivesLogitsPerSample) {
  Sequential m = reference_cnn();
  m.build(Shape{1, 28, 28}, 3);
  const Tensor& y = m.forward(test::random_tensor(Shape{5, 1, 28, 28}, 1, 0.0f, 1.0f), false);
  EXPECT_EQ(y.shape(), (Shape{5, 10}));
  EXPECT_EQ(y.layout(), Layout::RowMajor);
}

TEST(Sequential, SameSeedSameInitialisation) {
  Sequential a = reference_cnn(), b = reference_cnn(), c = reference_cnn();
  a.build(Shape{1, 28, 28}, 5);
  b.build(Shape{1, 28, 28}, 5);
  c.build(Shape{1, 28, 28}, 6);
  EXPECT_EQ(a.params().to_vector(), b.params().to_vector());
  EXPECT_NE(a.params().to_vector(), c.params().to_vector());
  // Glorot-uniform limit for conv2d_1: sqrt(6 / (32*9 + 64*9)) = 0.0833.
  const Tensor k = a.named_params()[2].second;
  float lo = 1, hi = -1;
  for (float v : k.to_vector()) lo = std::min(lo, v), hi = std::max(hi, v);
  EXPECT_GE(lo, -0.0834f);
  EXPECT_LE(hi, 0.0834f);
  EXPECT_LT(lo, -0.07f);  // and it actually spans the range
  EXPECT_GT(hi, 0.07f);
}

TEST(Sequential, TrainingDrivesTheLossDownOnASeparableProblem) {
  Sequential m;
  m.add<Conv2D>(4, Size2{3, 3}, Activation::ReLU);
  m.add<MaxPool2D>(Size2{2, 2});
  m.add<Flatten>();
  m.add<Dense>(2);
  m.compile(std::make_unique<Adam>(AdamOptions{.learning_rate = 1e-2f}));
  const Dataset train = test::corner_dataset(512, 1), test = test::corner_dataset(256, 2);
  FitOptions opt;
  opt.epochs = 10;
  opt.batch_size = 16;
  opt.seed = 3;
  opt.verbose = 0;
  const History h = m.fit(train, opt, &test);
  ASSERT_EQ(h.epochs.size(), 10u);  // 320 steps
  EXPECT_LT(h.epochs.back().loss, 0.1 * h.epochs.front().loss);
  EXPECT_GT(*h.epochs.back().val_accuracy, 0.98);
  const EvalResult r = m.evaluate(test);
  EXPECT_EQ(r.samples, 256);
  EXPECT_NEAR(r.accuracy, *h.epochs.back().val_accuracy, 1e-12);
  // predict() agrees with evaluate(): the argmax of its logits gives the same accuracy.
  Tensor x, y;
  std::vector<int64_t> all(256);
  for (int64_t i = 0; i < 256; ++i) all[static_cast<size_t>(i)] = i;
  test.gather(all, x, y);
  EXPECT_EQ(count_correct(m.predict(x, 100), y), static_cast<int64_t>(std::lround(r.accuracy * 256)));
  // A loader kept across evaluations (fit's validation) gives the same result every time, in
  // any batch size; one of other samples is refused, naming both shapes.
  DataLoader kept(test, {.batch_size = 100, .shuffle = false});
  for (int i = 0; i < 2; ++i) {
    const EvalResult k = m.evaluate(kept);
    EXPECT_EQ(k.samples, 256);
    EXPECT_NEAR(k.accuracy, r.accuracy, 1e-12);
    EXPECT_NEAR(k.loss, r.loss, 1e-6 * r.loss);  // batches of 100 instead of 256: other sums
  }
  const Dataset wide(Tensor::zeros(Shape{4, 1, 8, 9}, DType::U8), Tensor::zeros(Shape{4}, DType::I32), 2);
  DataLoader other(wide, {.batch_size = 2});
  EXPECT_THROW(m.evaluate(other), ShapeError);
}

TEST(Sequential, MaxStepsStopsTraining) {
  Sequential m;
  m.add<Flatten>();
  m.add<Dense>(2);
  m.compile(std::make_unique<SGD>());
  FitOptions opt;
  opt.epochs = 5;
  opt.batch_size = 10;
  opt.max_steps = 7;
  opt.verbose = 0;
  const History h = m.fit(test::corner_dataset(50, 1), opt);
  ASSERT_EQ(h.epochs.size(), 2u);  // 5 steps, then 2
  EXPECT_EQ(h.epochs[0].steps + h.epochs[1].steps, 7);
  EXPECT_EQ(m.optimizer()->iterations(), 7);
}

TEST(Sequential, ErrorsNameTheProblem) {
  Sequential empty;
  EXPECT_THROW(empty.build(Shape{1, 8, 8}), Error);
  Sequential m;
  m.add<Dense>(4);  // Dense straight on images: needs a Flatten
  try {
    m.build(Shape{1, 8, 8});
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("dense"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Flatten"), std::string::npos) << e.what();
  }
  Sequential n;
  n.add<Flatten>();
  n.add<Dense>(2);
  FitOptions opt;
  opt.verbose = 0;
  EXPECT_THROW(n.fit(test::corner_dataset(8, 1), opt), Error);  // not compiled
  n.compile(std::make_unique<Adam>());
  EXPECT_THROW(n.forward(Tensor::zeros(Shape{2, 1, 7, 8}), false), Error);  // not built yet
  n.build(Shape{1, 8, 8});
  EXPECT_THROW(n.forward(Tensor::zeros(Shape{2, 1, 7, 8}), false), ShapeError);
  EXPECT_THROW(n.add<Dense>(3), Error);  // after build
  // predict() checks the whole sample shape (it used to check only the rank and view 7x8
  // samples as 8x8 ones), and the dtype.
  try {
    n.predict(Tensor::zeros(Shape{8, 1, 7, 8}));
    FAIL() << "expected ShapeError";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("(1, 8, 8)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(n.predict(Tensor::zeros(Shape{7, 1, 8, 7})), ShapeError);
  EXPECT_THROW(n.predict(Tensor::zeros(Shape{2, 1, 8, 8}, DType::I32)), ShapeError);
  EXPECT_EQ(n.predict(Tensor::zeros(Shape{3, 1, 8, 8})).shape(), (Shape{3, 2}));
}

// A NaN or inf loss stops fit with NumericalError naming the epoch and step, instead of
// training (and checkpointing) a diverged model to the end.
TEST(Sequential, ANonFiniteLossStopsFitNamingTheStep) {
  auto make = [] {
    Sequential m;
    m.add<Flatten>();
    m.add<Dense>(2);
    m.compile(std::make_unique<SGD>());
    m.build(Shape{1, 8, 8});
    return m;
  };
  FitOptions opt;
  opt.verbose = 0;
  opt.batch_size = 10;
  opt.epochs = 3;
  int epochs_ended = 0;
  opt.on_epoch_end = [&](const EpochLogs&) { return ++epochs_ended > 0; };
  Sequential m = make();
  m.params().f32()[0] = std::numeric_limits<float>::quiet_NaN();
  try {
    m.fit(test::corner_dataset(50, 1), opt);
    FAIL() << "a NaN loss trained on";
  } catch (const NumericalError& e) {
    EXPECT_NE(std::string(e.what()).find("NaN at epoch 1, step 1/5"), std::string::npos) << e.what();
  }
  EXPECT_EQ(epochs_ended, 0);  // no checkpoint of it
  // Later in a run: epoch 2 starts from a model whose weight is infinite (loss inf or NaN).
  Sequential later = make();
  opt.on_epoch_end = [&](const EpochLogs& logs) {
    if (logs.epoch == 1) later.params().f32()[1] = std::numeric_limits<float>::infinity();
    return true;
  };
  try {
    later.fit(test::corner_dataset(50, 1), opt);
    FAIL() << "an infinite weight trained on";
  } catch (const NumericalError& e) {
    EXPECT_NE(std::string(e.what()).find("at epoch 2, step 1/5"), std::string::npos) << e.what();
  }
}

// A NaN in the data is named as the data's, not blamed on the training: the first non-finite
// batch has its inputs checked (here sample 13 holds a NaN: batch 2 of 10 rows, its row 3).
TEST(Sequential, ANaNInTheDataIsNamedAsTheData) {
  Sequential m;
  m.add<Dense>(2);
  m.compile(std::make_unique<SGD>());
  m.build(Shape{4});
  Tensor x = test::random_tensor(Shape{50, 4}, 3);
  x.f32()[13 * 4 + 2] = std::numeric_limits<float>::quiet_NaN();
  FitOptions opt;
  opt.verbose = 0;
  opt.batch_size = 10;
  opt.shuffle = false;
  try {
    m.fit(Dataset::from_tensors(x, test::cycling_labels(50, 2), {.num_classes = 2}), opt);
    FAIL() << "a NaN in the data trained on";
  } catch (const NumericalError& e) {
    EXPECT_NE(std::string(e.what()).find("NaN at epoch 1, step 2/5: the batch's data is not finite (input 0, row 3 "
                                         "of the batch holds NaN)"),
              std::string::npos)
        << e.what();
  }
}

// MetricSums counts the batches added while the loss sum stayed finite: the first bad batch.
TEST(Sequential, MetricSumsFindTheFirstNonFiniteBatch) {
  MetricSums sums(Device::cpu());
  SoftmaxCrossEntropy loss;
  Tensor labels = Tensor::zeros(Shape{2}, DType::I32);
  Tensor good = Tensor::zeros(Shape{2, 3});
  Tensor bad = Tensor::zeros(Shape{2, 3});
  bad.f32()[4] = std::numeric_limits<float>::quiet_NaN();
  for (const Tensor* t : {&good, &good, &good, &bad, &good}) loss.forward(*t, labels, sums);
  const MetricSums::Values v = sums.read();
  EXPECT_FALSE(v.finite());
  EXPECT_EQ(v.finite_batches, 3);
  sums.reset();
  loss.forward(good, labels, sums);
  EXPECT_TRUE(sums.read().finite());
  EXPECT_EQ(sums.read().finite_batches, 1);
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// The whole model's gradients (fused Conv-ReLU -> MaxPool backward included) against finite
// differences of the real loss.
TEST(Sequential, ModelGradientsMatchFiniteDifferencesWithFusedReluPool) {
  Sequential m;
  m.add<Conv2D>(3, Size2{3, 3}, Activation::ReLU);
  m.add<MaxPool2D>(Size2{2, 2});
  m.add<Conv2D>(4, Size2{2, 2}, Activation::ReLU, Padding::Same);
  m.add<ReLU>();
  m.add<MaxPool2D>(Size2{2, 2});
  m.add<Flatten>();
  m.add<Dense>(5, Activation::ReLU);
  m.add<Dense>(3);
  m.build(Shape{2, 10, 10}, 4);
  EXPECT_TRUE(m.layers()[0]->output_grad_premasked());   // conv -> pool: fused
  EXPECT_TRUE(m.layers()[3]->output_grad_premasked());   // ReLU layer -> pool: fused
  EXPECT_FALSE(m.layers()[2]->output_grad_premasked());  // conv -> ReLU layer: not
  const Tensor x = test::random_tensor(Shape{3, 2, 10, 10}, 5);
  Tensor labels = Tensor::zeros(Shape{3}, DType::I32);
  labels.data<int32_t>()[1] = 2;
  m.compute_gradients(x, labels);
  const std::vector<float> analytic = m.grads().to_vector();
  SoftmaxCrossEntropy loss;
  test::GradCheckOptions opt;
  opt.step = 1e-3;  // the loss is smooth between kinks; keep its curvature error small
  test::check_gradient([&] { return double(loss.forward(m.forward(x, true), labels)); },
                       std::span<float>(m.params().f32(), static_cast<size_t>(m.params().numel())), analytic, "model",
                       opt);
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// The ready-made models (layers/model/zoo.h): their sizes as Keras counts them, and a model
// named otherwise taking the same layers.
TEST(Models, TheReadyMadeModelsHaveTheirDocumentedSizes) {
  Sequential cnn = models::reference_cnn();
  cnn.build(Shape{1, 28, 28}, 1);
  EXPECT_EQ(cnn.num_params(), 93322);
  EXPECT_EQ(cnn.layers().size(), 8u);
  Sequential bn = models::bn_cnn();
  bn.build(Shape{1, 28, 28}, 1);
  EXPECT_EQ(bn.num_params(), 50378);  // 50,570 with the 192 moving statistics
  EXPECT_EQ(bn.num_params() + bn.num_non_trainable(), 50570);
  Model res = models::resnet();
  res.build(1);
  EXPECT_EQ(res.num_params(), 151274);
  EXPECT_EQ(res.name(), "resnet");
  Sequential five("five_classes");
  models::add_reference_cnn(five, 5);
  five.build(Shape{1, 28, 28}, 1);
  EXPECT_EQ(five.num_params(), 93322 - 5 * 65);  // the last Dense: 64 x 5 + 5 instead of 64 x 10 + 10
  EXPECT_EQ(five.name(), "five_classes");
}

}  // namespace
}  // namespace ember
