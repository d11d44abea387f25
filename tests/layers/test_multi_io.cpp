// Models of several inputs and outputs (layers/model/model.h) and datasets of several inputs and
// targets (data/dataset.h): gradients against finite differences, the same training as the
// one-input model of the concatenated features (bit for bit), named inputs and targets matched by
// name, each output's loss and metrics in the history, micro-batches, predict, checkpoints and
// load_model, replicas, and the errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "test_util.h"

namespace ember {
namespace {

// An image and a vector of measurements, one label: the two-input model of the usage guide.
Model image_and_meta(const std::string& image_name = "image", const std::string& meta_name = "meta") {
  SymbolicTensor image = Input(Shape{1, 6, 6}, image_name);
  SymbolicTensor meta = Input(Shape{4}, meta_name);
  SymbolicTensor h = layer<Conv2D>(3, Size2{3, 3}, Activation::ReLU)(image);
  h = layer<Flatten>()(layer<MaxPool2D>(Size2{2, 2})(h));
  SymbolicTensor m = layer<Tanh>()(layer<Dense>(5)(meta));
  return Model({image, meta}, {layer<Dense>(3)(concatenate({h, m}))}, "two_inputs");
}

Tensor labels_of(int64_t n, int classes) {
  Tensor labels = Tensor::zeros(Shape{n}, DType::I32);
  for (int64_t i = 0; i < n; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % classes);
  return labels;
}

TEST(MultiInput, GradientsMatchFiniteDifferences) {
  Model m = image_and_meta();
  m.build(4);
  EXPECT_EQ(m.num_inputs(), 2u);
  EXPECT_EQ(m.input_names(), (std::vector<std::string>{"image", "meta"}));
  EXPECT_FALSE(m.is_linear());
  const std::vector<Tensor> xs{test::random_tensor(Shape{3, 1, 6, 6}, 5), test::random_tensor(Shape{3, 4}, 6)};
  const Tensor labels = labels_of(3, 3);
  MetricSums sums = m.make_sums();
  m.compute_gradients(xs, labels, sums);
  const std::vector<float> analytic = m.grads().to_vector();
  SoftmaxCrossEntropy loss;
  test::GradCheckOptions opt;
  opt.step = 1e-3;  // as the graph model's check: smooth between kinks
  const test::GradCheckResult r = test::check_gradient(
      [&] { return double(loss.forward(m.forward(xs, true), labels)); },
      std::span<float>(m.params().f32(), static_cast<size_t>(m.params().numel())), analytic, "two inputs", opt);
  EXPECT_GT(r.checked, m.num_params() * 3 / 4);
  // The loss the step reported is the forward's (the same logits: the same float).
  EXPECT_EQ(static_cast<float>(sums.read().loss_sum / 3.0), loss.forward(m.forward(xs, true), labels));
}

// Two vector inputs concatenated into a Dense are one input of the concatenated features: the same
// kernel sees the same values in the same order, so fit on a two-input dataset (u8 and f32 inputs,
// each with its scale) gives the one-input model's parameters bit for bit: the batches, their rows
// and every input's scaling are right. Named inputs given in the other order are matched by name.
TEST(MultiInput, TrainsAsTheOneInputModelOfTheConcatenatedFeatures) {
  const int64_t n = 200;
  Tensor a = Tensor::empty(Shape{n, 3}, DType::U8), b = Tensor::empty(Shape{n, 5}, DType::F32);
  Tensor both = Tensor::empty(Shape{n, 8}, DType::F32);
  Rng rng(11);
  for (int64_t i = 0; i < n; ++i) {
    for (int j = 0; j < 3; ++j) {
      a.data<uint8_t>()[i * 3 + j] = static_cast<uint8_t>(rng.below(256));
      both.f32()[i * 8 + j] = static_cast<float>(a.data<uint8_t>()[i * 3 + j]) * (1.0f / 255.0f);
    }
    for (int j = 0; j < 5; ++j) {
      b.f32()[i * 5 + j] = rng.uniform() - 0.5f;
      both.f32()[i * 8 + 3 + j] = b.f32()[i * 5 + j] * 2.0f;
    }
  }
  const Tensor labels = labels_of(n, 4);
  const auto make_two = [] {
    SymbolicTensor xa = Input(Shape{3}, "a"), xb = Input(Shape{5}, "b");
    SymbolicTensor h = layer<Dense>(6, Activation::ReLU)(concatenate({xa, xb}));
    return Model({xa, xb}, {layer<Dense>(4)(h)});
  };
  const auto make_one = [] {
    SymbolicTensor x = Input(Shape{8});
    return Model(x, layer<Dense>(4)(layer<Dense>(6, Activation::ReLU)(x)));
  };
  FitOptions opt;
  opt.epochs = 3;
  opt.batch_size = 32;  // 200 / 32: a short last batch too
  opt.seed = 5;
  opt.verbose = 0;
  const auto train = [&](Model m, const Dataset& data) {
    m.build(7);
    m.compile(std::make_unique<Adam>(AdamOptions{.learning_rate = 1e-2f}));
    const History h = m.fit(data, opt, &data);
    return std::make_pair(m.params().to_vector(), h.epochs.back().val_loss.value());
  };
  const auto one = train(make_one(), Dataset::from_tensors(both, labels, {.num_classes = 4}));
  const auto two = train(make_two(), Dataset::from_inputs({{.name = "a", .values = a, .scale = 1.0f / 255.0f},
                                                           {.name = "b", .values = b, .scale = 2.0f}},
                                                          labels, {.num_classes = 4}));
  EXPECT_EQ(two.first, one.first);
  EXPECT_EQ(two.second, one.second);
  // Named inputs in the other order: matched by name, the same run.
  const auto swapped = train(make_two(), Dataset::from_inputs({{.name = "b", .values = b, .scale = 2.0f},
                                                               {.name = "a", .values = a, .scale = 1.0f / 255.0f}},
                                                              labels, {.num_classes = 4}));
  EXPECT_EQ(swapped.first, one.first);
  // Unnamed: by position, so swapped they do not fit (the shapes differ) and say so.
  Model m = make_two();
  m.compile(std::make_unique<Adam>());
  const Dataset by_position = Dataset::from_inputs({{.values = b}, {.values = a}}, labels);
  EXPECT_THROW(m.fit(by_position, opt), ShapeError);
  // The training moved the parameters (so equality above is not of two untouched models).
  Model fresh = make_one();
  fresh.build(7);
  EXPECT_NE(fresh.params().to_vector(), one.first);
}

// A batch in micro-batches (every input sliced alike) against the whole batch: the same gradients
// bit for bit, since 16-row slices are the groups of the batch's sum order (core/pairwise_sum.h).
TEST(MultiInput, MicroBatchesSliceEveryInput) {
  const std::vector<Tensor> xs{test::random_tensor(Shape{64, 1, 6, 6}, 1), test::random_tensor(Shape{64, 4}, 2)};
  const Tensor labels = labels_of(64, 3);
  const auto grads = [&](int64_t rows) {
    Model m = image_and_meta();
    m.build(3);
    m.set_cpu_micro_batch(rows);
    MetricSums sums = m.make_sums();
    m.compute_gradients(xs, labels, sums);
    return std::make_pair(m.grads().to_vector(), sums.read());
  };
  const auto whole = grads(0), sliced = grads(16);
  EXPECT_EQ(whole.first, sliced.first);
  // The rows' losses are the same floats either way (measured); only their double sum is regrouped.
  EXPECT_NEAR(sliced.second.loss_sum, whole.second.loss_sum, 1e-12 * whole.second.loss_sum);
  EXPECT_EQ(sliced.second.correct, whole.second.correct);
}

TEST(MultiInput, PredictsEvaluatesSummarisesAndRecreatesFromItsCheckpoint) {
  Model m = image_and_meta();
  m.build(9);
  m.compile(std::make_unique<Adam>());
  const std::vector<Tensor> xs{test::random_tensor(Shape{10, 1, 6, 6}, 3, 0.0f, 1.0f),
                               test::random_tensor(Shape{10, 4}, 4)};
  const Tensor out = m.predict(xs, 4);  // in batches of 4
  EXPECT_EQ(out.to_vector(), Tensor(m.forward(xs, false)).to_vector());
  // evaluate on the same rows: its loss is the forward's.
  const Dataset data = Dataset::from_inputs({{.name = "meta", .values = xs[1]}, {.name = "image", .values = xs[0]}},
                                            labels_of(10, 3), {.num_classes = 3});
  const EvalResult e = m.evaluate(data);
  SoftmaxCrossEntropy loss;
  EXPECT_NEAR(e.loss, loss.forward(m.forward(xs, false), labels_of(10, 3)), 1e-6);
  const std::string s = m.summary();
  EXPECT_NE(s.find("image (InputLayer)"), std::string::npos) << s;
  EXPECT_NE(s.find("meta (InputLayer)"), std::string::npos) << s;
  EXPECT_NE(s.find("['meta[0][0]']"), std::string::npos) << s;  // the Dense on the second input
  const std::string path = (std::filesystem::temp_directory_path() / "ember_multi_input.safetensors").string();
  m.save(path);
  std::unique_ptr<Model> again = load_model(path);
  EXPECT_EQ(again->input_names(), m.input_names());
  EXPECT_EQ(again->input_shapes(), m.input_shapes());
  EXPECT_EQ(again->predict(xs).to_vector(), out.to_vector());
  // Loading into a model whose inputs differ names the difference: a renamed input (seen in the
  // layers' connections), an input of another shape with the same layers (seen in the inputs).
  const auto refusal = [&](Model other) {
    other.build(9);
    try {
      other.load(path);
    } catch (const CheckpointError& err) {
      return std::string(err.what());
    }
    return std::string("loaded");
  };
  EXPECT_NE(refusal(image_and_meta("image", "measurements")).find("on [\"measurements\"] in this model"),
            std::string::npos);
  // The same layers on a taller image (conv2d's kernel fits either; the inputs' shapes differ).
  SymbolicTensor image = Input(Shape{1, 8, 6}, "image"), meta = Input(Shape{4}, "meta");
  SymbolicTensor h = layer<Conv2D>(3, Size2{3, 3}, Activation::ReLU)(image);
  h = layer<Flatten>()(layer<MaxPool2D>(Size2{2, 2})(h));
  SymbolicTensor m2 = layer<Tanh>()(layer<Dense>(5)(meta));
  const std::string taller = refusal(Model({image, meta}, {layer<Dense>(3)(concatenate({h, m2}))}, "two_inputs"));
  EXPECT_NE(taller.find("holds a model of inputs"), std::string::npos) << taller;
  std::filesystem::remove(path);
}

TEST(MultiInput, RefusesWhatItCannotRun) {
  SymbolicTensor a = Input(Shape{3}), b = Input(Shape{2});
  SymbolicTensor y = layer<Dense>(2)(a);
  EXPECT_THROW(Model({a, b}, {y}), ArgumentError);                                  // b does not reach the output
  EXPECT_THROW(Model({a, a}, {y}), ArgumentError);                                  // an input given twice
  EXPECT_THROW(Model({a}, {layer<Dense>(2)(concatenate({a, b}))}), ArgumentError);  // b not given
  Model m = image_and_meta();
  m.build(1);
  const Tensor image = test::random_tensor(Shape{4, 1, 6, 6}, 1), meta = test::random_tensor(Shape{4, 4}, 2);
  EXPECT_THROW(m.forward(image, false), ArgumentError);                                               // one of two
  EXPECT_THROW(m.forward(std::vector<Tensor>{meta, image}, false), ShapeError);                       // swapped
  EXPECT_THROW(m.forward(std::vector<Tensor>{image, meta.view(0, Shape{3, 4})}, false), ShapeError);  // rows
  EXPECT_THROW(m.predict(std::vector<Tensor>{image}), ArgumentError);
  EXPECT_THROW(m.build(Shape{1, 6, 6}), Error);  // already built; and one shape cannot build two inputs
  Model fresh = image_and_meta();
  EXPECT_THROW(fresh.build(Shape{1, 6, 6}), ShapeError);
  const Tensor labels = labels_of(4, 3);
  // Datasets: all inputs named or none, names unique, the same rows, the model's names present
  // and nothing left over.
  EXPECT_THROW(Dataset::from_inputs({{.name = "image", .values = image}, {.values = meta}}, labels), ArgumentError);
  EXPECT_THROW(Dataset::from_inputs({{.name = "x", .values = image}, {.name = "x", .values = meta}}, labels),
               ArgumentError);
  EXPECT_THROW(Dataset::from_inputs({{.values = image}, {.values = meta.view(0, Shape{3, 4})}}, labels), ShapeError);
  EXPECT_THROW(Dataset::from_inputs({{.values = image}}, labels, {.scale = 0.5f}), ArgumentError);
  m.compile(std::make_unique<Adam>());
  const Dataset missing = Dataset::from_inputs({{.name = "image", .values = image}}, labels);
  EXPECT_THROW(m.evaluate(missing), ShapeError);
  const Dataset extra = Dataset::from_inputs(
      {{.name = "image", .values = image}, {.name = "meta", .values = meta}, {.name = "more", .values = meta}}, labels);
  EXPECT_THROW(m.evaluate(extra), ShapeError);
  const Dataset ok =
      Dataset::from_inputs({{.name = "image", .values = image}, {.name = "meta", .values = meta}}, labels);
  EXPECT_EQ(m.evaluate(ok).samples, 4);
  EXPECT_THROW(ok.gather(std::vector<int64_t>{0}, const_cast<Tensor&>(image), const_cast<Tensor&>(labels)),
               ArgumentError);  // two inputs do not gather into one x
}

// Replicas of a two-input model (Mirrored 2 and 4, each shard of both inputs) equal the one model
// bit for bit under Exact, as a one-input graph's do (tests/distribute).
TEST(MultiInput, MirroredReplicasUnderExactEqualOneModelBitForBit) {
  const int64_t n = 256;
  Tensor images = Tensor::empty(Shape{n, 1, 6, 6}, DType::U8), meta = test::random_tensor(Shape{n, 4}, 8);
  Rng rng(4);
  for (int64_t i = 0; i < images.numel(); ++i) images.data<uint8_t>()[i] = static_cast<uint8_t>(rng.below(256));
  const Dataset d = Dataset::from_inputs(
      {{.name = "image", .values = images, .scale = 1.0f / 255.0f}, {.name = "meta", .values = meta}}, labels_of(n, 3),
      {.num_classes = 3});
  const auto train = [&](std::unique_ptr<Strategy> s) {
    ModelRecipe r;
    r.make_model = [] { return std::make_unique<Model>(image_and_meta()); };
    r.seed = 2;
    r.make_optimizer = [] { return std::make_unique<Adam>(); };
    s->build(r);
    FitOptions o;
    o.batch_size = 64;
    o.max_steps = 8;
    o.seed = 3;
    o.verbose = 0;
    s->fit(d, o);
    // The custom loop's step with both inputs, too.
    const std::vector<Tensor> xs{test::random_tensor(Shape{64, 1, 6, 6}, 5, 0.0f, 1.0f),
                                 test::random_tensor(Shape{64, 4}, 6)};
    s->train_step(xs, labels_of(64, 3));
    return s->model().params().to_vector();
  };
  std::vector<float> single;
  {
    const test::ConvAlgorithmsScope exact(ConvAlgorithms::Exact);
    single = train(make_default_strategy());
    for (int replicas : {2, 4}) EXPECT_EQ(train(make_mirrored_cpu_strategy(replicas)), single) << replicas;
  }
  Model fresh = image_and_meta();
  fresh.build(2);
  EXPECT_NE(fresh.params().to_vector(), single) << "the parameters must have moved";
}

// --- Several outputs ----------------------------------------------------------------------------

// A trunk and two heads: "digit" (3 logits, sparse cross-entropy, accuracy) and "size" (2 values,
// mean squared error, mae); the trunk's output is also read by the second head only through a
// Dense, and `h` feeds both heads (its gradient is the sum of theirs).
Model two_heads() {
  SymbolicTensor x = Input(Shape{5});
  SymbolicTensor h = layer<Tanh>()(layer<Dense>(6)(x));
  auto digit = layer<Dense>(3);
  digit->set_name("digit");
  auto size = layer<Dense>(2);
  size->set_name("size");
  return Model({x}, {digit(h), size(h)}, "two_heads");
}

std::vector<OutputLoss> two_losses(double size_weight) {
  std::vector<OutputLoss> out;
  out.push_back({.loss = std::make_unique<losses::SparseCategoricalCrossentropy>(),
                 .weight = 1.0,
                 .metrics = {std::make_shared<metrics::SparseCategoricalAccuracy>()}});
  out.push_back({.loss = std::make_unique<losses::MeanSquaredError>(),
                 .weight = size_weight,
                 .metrics = {std::make_shared<metrics::MeanAbsoluteError>()}});
  return out;
}

// The model's loss is the weighted sum of its outputs' (0.5 on "size"): every parameter's gradient
// against central differences of that sum, and the sums' blocks hold each output's own loss.
TEST(MultiOutput, GradientsOfTheWeightedSumMatchFiniteDifferences) {
  Model m = two_heads();
  m.build(2);
  m.compile(std::make_unique<Adam>(), two_losses(0.5));
  EXPECT_EQ(m.num_outputs(), 2u);
  EXPECT_EQ(m.output_names(), (std::vector<std::string>{"digit", "size"}));
  ASSERT_EQ(m.output_layers().size(), 2u);  // each output's layer, in output order
  for (size_t k = 0; k < 2; ++k)
    EXPECT_EQ(m.layers()[static_cast<size_t>(m.output_layers()[k])]->name(), m.output_names()[k]);
  const std::vector<Tensor> xs{test::random_tensor(Shape{4, 5}, 1)};
  const std::vector<Tensor> ys{labels_of(4, 3), test::random_tensor(Shape{4, 2}, 2)};
  MetricSums sums = m.make_sums();
  m.compute_gradients(xs, ys, sums);
  const std::vector<float> analytic = m.grads().to_vector();
  losses::SparseCategoricalCrossentropy ce;
  losses::MeanSquaredError mse;
  const auto total = [&] {
    m.forward(xs, true);
    return double(ce.value(m.output(0), ys[0])) + 0.5 * double(mse.value(m.output(1), ys[1]));
  };
  test::GradCheckOptions opt;
  opt.step = 1e-3;
  const test::GradCheckResult r = test::check_gradient(
      total, std::span<float>(m.params().f32(), static_cast<size_t>(m.params().numel())), analytic, "two heads", opt);
  EXPECT_GT(r.checked, m.num_params() * 3 / 4);
  m.forward(xs, true);
  const MetricSums::Values v = sums.read();
  ASSERT_EQ(v.outputs.size(), 2u);
  // Each block's sum is its loss's own: value() is that sum's mean rounded to float, so 4 value()
  // is within 2^-24 (6e-8) of the sum (measured 4.6e-8 and 4.3e-8).
  EXPECT_NEAR(v.outputs[0].loss_sum, 4.0 * ce.value(m.output(0), ys[0]), 6e-8 * v.outputs[0].loss_sum);
  EXPECT_NEAR(v.outputs[1].loss_sum, 4.0 * mse.value(m.output(1), ys[1]), 6e-8 * v.outputs[1].loss_sum);
  EXPECT_EQ(v.loss_sum, v.outputs[0].loss_sum + 0.5 * v.outputs[1].loss_sum);
  // Weight 0 on "size": its head's parameters get no gradient at all, the other's are unchanged.
  Model zero = two_heads();
  zero.build(2);
  zero.compile(std::make_unique<Adam>(), two_losses(0.0));
  MetricSums zs = zero.make_sums();
  zero.compute_gradients(xs, ys, zs);
  const auto grads_of = [](Model& model, const std::string& prefix) {
    std::vector<float> out;
    int64_t offset = 0;
    const std::vector<float> all = model.grads().to_vector();
    for (const auto& [name, p] : model.named_params()) {
      if (name.rfind(prefix, 0) == 0) out.insert(out.end(), all.begin() + offset, all.begin() + offset + p.numel());
      offset += Model::aligned_view(p.numel());  // views start on 256-byte boundaries of the buffer
    }
    return out;
  };
  for (float g : grads_of(zero, "size/")) EXPECT_EQ(g, 0.0f);
  EXPECT_EQ(grads_of(zero, "digit/"), grads_of(m, "digit/"));
}

// An output that another layer reads too: its gradient is its loss's plus the reader's.
TEST(MultiOutput, AnOutputReadByAnotherLayerGetsBothGradients) {
  SymbolicTensor x = Input(Shape{4});
  SymbolicTensor h = layer<Dense>(3)(x);                 // output 0, and read by the next Dense
  SymbolicTensor y = layer<Dense>(2)(layer<Tanh>()(h));  // output 1
  Model m({x}, {h, y});
  m.build(5);
  std::vector<OutputLoss> outs;
  outs.push_back({.loss = std::make_unique<losses::MeanSquaredError>(), .weight = 2.0, .metrics = {}});
  outs.push_back({.loss = std::make_unique<losses::SparseCategoricalCrossentropy>(), .weight = 1.0, .metrics = {}});
  m.compile(std::make_unique<Adam>(), std::move(outs));
  const std::vector<Tensor> xs{test::random_tensor(Shape{3, 4}, 3)};
  const std::vector<Tensor> ys{test::random_tensor(Shape{3, 3}, 4), labels_of(3, 2)};
  MetricSums sums = m.make_sums();
  m.compute_gradients(xs, ys, sums);
  const std::vector<float> analytic = m.grads().to_vector();
  losses::MeanSquaredError mse;
  losses::SparseCategoricalCrossentropy ce;
  const auto total = [&] {
    m.forward(xs, true);
    return 2.0 * double(mse.value(m.output(0), ys[0])) + double(ce.value(m.output(1), ys[1]));
  };
  test::GradCheckOptions opt;
  opt.step = 1e-3;
  const test::GradCheckResult r = test::check_gradient(
      total, std::span<float>(m.params().f32(), static_cast<size_t>(m.params().numel())), analytic, "h and y", opt);
  EXPECT_GT(r.checked, m.num_params() * 3 / 4);
}

// fit on a dataset of two targets named after the outputs (given in the other order): the
// history has Keras' names, the epoch's loss is the weighted sum of the outputs' losses, evaluate
// agrees with it, predict_outputs gives each output, and load_model recreates both outputs.
TEST(MultiOutput, FitsLogsEachOutputAndRecreatesFromItsCheckpoint) {
  const int64_t n = 256;
  const Tensor x = test::random_tensor(Shape{n, 5}, 7);
  Tensor digit = Tensor::empty(Shape{n}, DType::I32), size = Tensor::empty(Shape{n, 2}, DType::F32);
  for (int64_t i = 0; i < n; ++i) {  // learnable: the label from x's sign pattern, the sizes linear in x
    const float* r = x.f32() + i * 5;
    digit.data<int32_t>()[i] = (r[0] > 0 ? 1 : 0) + (r[1] > 0 ? 1 : 0);
    size.f32()[i * 2] = 0.5f * r[2] - r[3];
    size.f32()[i * 2 + 1] = r[4];
  }
  const Dataset data = Dataset::from_inputs(
      {{.values = x}}, {{.name = "size", .values = size}, {.name = "digit", .values = digit}}, {.num_classes = 3});
  Model m = two_heads();
  m.build(4);
  m.compile(std::make_unique<Adam>(AdamOptions{.learning_rate = 1e-2f}), two_losses(0.5));
  EXPECT_EQ(m.metric_names(), (std::vector<std::string>{"digit_loss", "size_loss", "digit_accuracy", "size_mae"}));
  FitOptions opt;
  opt.epochs = 40;
  opt.batch_size = 32;
  opt.seed = 2;
  opt.verbose = 0;
  const History h = m.fit(data, opt, &data);
  const EpochLogs& last = h.epochs.back();
  const double digit_loss = *find_value(last.metrics, "digit_loss"), size_loss = *find_value(last.metrics, "size_loss");
  // The same double sums divided by n in another grouping: a few double roundings.
  EXPECT_NEAR(last.loss, digit_loss + 0.5 * size_loss, 1e-15 * last.loss);
  EXPECT_LT(last.loss, 0.5 * h.epochs.front().loss);
  // Both heads learn (measured 0.875 and 0.076 after 40 epochs; chance: 0.5, the middle class,
  // and about 0.5, the targets' mean absolute deviation).
  EXPECT_GT(*find_value(last.metrics, "digit_accuracy"), 0.8);
  EXPECT_LT(*find_value(last.metrics, "size_mae"), 0.15);
  EXPECT_FALSE(last.val_accuracy.has_value());  // no metric named "accuracy": digit_accuracy is
  const EvalResult e = m.evaluate(data);
  EXPECT_EQ(e.loss, *last.val_loss);
  EXPECT_EQ(*find_value(e.metrics, "size_mae"), *find_value(last.val_metrics, "size_mae"));
  EXPECT_NEAR(e.loss, *find_value(e.metrics, "digit_loss") + 0.5 * *find_value(e.metrics, "size_loss"), 1e-15 * e.loss);
  // predict_outputs: each output, as forward gives it.
  const std::vector<Tensor> outs = m.predict_outputs({x}, 100);
  ASSERT_EQ(outs.size(), 2u);
  m.forward(x, false);
  EXPECT_EQ(outs[0].to_vector(), Tensor(m.output(0)).to_vector());
  EXPECT_EQ(outs[1].to_vector(), Tensor(m.output(1)).to_vector());
  EXPECT_THROW(m.predict(x), ArgumentError);  // one tensor cannot hold two outputs
  const std::string path = (std::filesystem::temp_directory_path() / "ember_multi_output.safetensors").string();
  m.save(path);
  std::unique_ptr<Model> again = load_model(path);
  EXPECT_EQ(again->output_names(), m.output_names());
  EXPECT_EQ(again->predict_outputs({x})[1].to_vector(), outs[1].to_vector());
  std::filesystem::remove(path);
}

// Micro-batches slice every target alike; replicas of a two-output model equal the one model.
TEST(MultiOutput, MicroBatchesAndMirroredReplicasEqualTheWholeModel) {
  const std::vector<Tensor> xs{test::random_tensor(Shape{64, 5}, 1)};
  const std::vector<Tensor> ys{labels_of(64, 3), test::random_tensor(Shape{64, 2}, 2)};
  const auto grads = [&](int64_t rows) {
    Model m = two_heads();
    m.build(3);
    m.compile(std::make_unique<Adam>(), two_losses(0.5));
    m.set_cpu_micro_batch(rows);
    MetricSums sums = m.make_sums();
    m.compute_gradients(xs, ys, sums);
    return std::make_pair(m.grads().to_vector(), sums.read());
  };
  const auto whole = grads(0), sliced = grads(16);
  EXPECT_EQ(whole.first, sliced.first);  // the same bits, as MicroBatchesSliceEveryInput
  EXPECT_NEAR(sliced.second.loss_sum, whole.second.loss_sum, 1e-12 * whole.second.loss_sum);  // as above
  EXPECT_EQ(sliced.second.outputs[0].correct, whole.second.outputs[0].correct);
  EXPECT_EQ(sliced.second.outputs[1].finite_batches, 1);  // one batch, however many slices

  const int64_t n = 256;
  const Tensor x = test::random_tensor(Shape{n, 5}, 9);
  const Dataset d = Dataset::from_inputs(
      {{.values = x}}, {{.values = labels_of(n, 3)}, {.values = test::random_tensor(Shape{n, 2}, 10)}});
  const auto train = [&](std::unique_ptr<Strategy> s) {
    ModelRecipe r;
    r.make_model = [] { return std::make_unique<Model>(two_heads()); };
    r.seed = 2;
    r.make_optimizer = [] { return std::make_unique<Adam>(); };
    r.make_outputs = [] { return two_losses(0.5); };
    s->build(r);
    FitOptions o;
    o.batch_size = 64;
    o.max_steps = 4;
    o.seed = 3;
    o.verbose = 0;
    s->fit(d, o);
    s->train_step(xs, ys);  // the custom loop's step with both targets
    const EvalResult e = s->evaluate(d);
    return std::make_pair(s->model().params().to_vector(), e.metrics);
  };
  const test::ConvAlgorithmsScope exact(ConvAlgorithms::Exact);
  const auto single = train(make_default_strategy());
  for (int replicas : {2, 4}) {
    const auto many = train(make_mirrored_cpu_strategy(replicas));
    EXPECT_EQ(many.first, single.first) << replicas;
    ASSERT_EQ(many.second.size(), 4u);
    for (size_t i = 0; i < 4; ++i) EXPECT_EQ(many.second[i].first, single.second[i].first);
  }
}

// forward() of a model of several outputs returns output 0 (the run ends with the last output's
// layer); a one-output model's loss weight scales what it reports as well as its gradient.
TEST(MultiOutput, ForwardGivesOutputZeroAndAOneOutputWeightScalesTheLoss) {
  Model m = two_heads();
  m.build(6);
  const Tensor x = test::random_tensor(Shape{3, 5}, 4);
  const Tensor& y = m.forward(x, false);
  EXPECT_EQ(&y, &m.output(0));
  EXPECT_EQ(y.shape(), (Shape{3, 3}));  // "digit", not "size" (run last)
  // One output, weight 4: loss and gradient four times the weight-1 model's, exactly (a power of
  // two scales every product and sum of the backward pass without rounding).
  const auto run = [&](double weight) {
    SymbolicTensor in = Input(Shape{5});
    Model one(in, layer<Dense>(3)(in));
    one.build(1);
    std::vector<OutputLoss> outs;
    outs.push_back(
        {.loss = std::make_unique<losses::SparseCategoricalCrossentropy>(), .weight = weight, .metrics = {}});
    one.compile(std::make_unique<Adam>(), std::move(outs));
    const float loss = one.compute_gradients(x, labels_of(3, 3));
    return std::make_pair(loss, one.grads().to_vector());
  };
  // A model that is only a final Softmax: a loss that takes logits reads the input itself.
  SymbolicTensor in = Input(Shape{3});
  Model soft(in, layer<Softmax>()(in));
  soft.build(1);
  soft.compile(std::make_unique<Adam>());
  MetricSums sums = soft.make_sums();
  soft.evaluate_batch(x.view(0, Shape{5, 3}), labels_of(5, 3), sums);
  losses::SparseCategoricalCrossentropy ce;
  // value() is the sum's mean rounded to float: within half a float ulp of it.
  const double sum = sums.read().loss_sum;
  EXPECT_NEAR(sum, 5.0 * double(ce.value(x.view(0, Shape{5, 3}), labels_of(5, 3))), 6e-8 * sum);
  const auto w1 = run(1.0), w4 = run(4.0);
  EXPECT_EQ(w4.first, 4.0f * w1.first);
  for (size_t i = 0; i < w1.second.size(); ++i) EXPECT_EQ(w4.second[i], 4.0f * w1.second[i]) << i;
}

TEST(MultiOutput, RefusesWhatItCannotRun) {
  Model m = two_heads();
  m.build(1);
  // Not compiled with a loss per output: said so, not run with the default loss on one output.
  EXPECT_THROW(m.make_sums(), Error);
  EXPECT_THROW(m.evaluate(Dataset::from_inputs({{.values = test::random_tensor(Shape{4, 5}, 1)}},
                                               {{.values = labels_of(4, 3)}, {.values = Tensor::zeros(Shape{4, 2})}})),
               Error);
  EXPECT_THROW(m.backward(Tensor::zeros(Shape{4, 3})), ArgumentError);  // one gradient for two outputs
  EXPECT_THROW(m.compile(std::make_unique<Adam>()), ArgumentError);     // one loss for two outputs
  std::vector<OutputLoss> negative = two_losses(-1.0);
  EXPECT_THROW(m.compile(std::make_unique<Adam>(), std::move(negative)), ArgumentError);
  // A Softmax output under a loss that takes logits: one-output models only.
  SymbolicTensor x = Input(Shape{4});
  SymbolicTensor h = layer<Dense>(3)(x);
  Model soft({x}, {layer<Softmax>()(h), layer<Dense>(2)(h)});
  soft.build(1);
  std::vector<OutputLoss> outs;
  outs.push_back({.loss = std::make_unique<losses::SparseCategoricalCrossentropy>(), .weight = 1.0, .metrics = {}});
  outs.push_back({.loss = std::make_unique<losses::MeanSquaredError>(), .weight = 1.0, .metrics = {}});
  EXPECT_THROW(soft.compile(std::make_unique<Adam>(), std::move(outs)), ArgumentError);
  EXPECT_THROW(Model({x}, {h, h}), ArgumentError);  // an output given twice
  m.compile(std::make_unique<Adam>(), two_losses(1.0));
  const Tensor in = test::random_tensor(Shape{4, 5}, 1);
  // Data: the targets' count, names and shapes.
  EXPECT_THROW(m.evaluate(Dataset::from_tensors(in, labels_of(4, 3))), ShapeError);  // one target of two
  const Dataset misnamed = Dataset::from_inputs(
      {{.values = in}},
      {{.name = "digit", .values = labels_of(4, 3)}, {.name = "sizes", .values = Tensor::zeros(Shape{4, 2})}});
  EXPECT_THROW(m.evaluate(misnamed), ShapeError);
  const Dataset swapped =
      Dataset::from_inputs({{.values = in}}, {{.values = Tensor::zeros(Shape{4, 2})}, {.values = labels_of(4, 3)}});
  EXPECT_THROW(m.evaluate(swapped), ShapeError);  // by position: MSE's targets where the labels go
  MetricSums one_block(Device::cpu(), 1);
  EXPECT_THROW(m.compute_gradients(std::vector<Tensor>{in},
                                   std::vector<Tensor>{labels_of(4, 3), Tensor::zeros(Shape{4, 2})}, one_block),
               ArgumentError);  // sums made for one output
}

}  // namespace
}  // namespace ember
