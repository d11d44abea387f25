// Graph models (layers/model/graph.h, layers/model/model.h): a stack built as a graph is the
// Sequential bit for bit (the one engine); residual and branching graphs' gradients against finite
// differences (a tensor read by several layers sums their gradients); the Conv2D -> MaxPool2D
// fusion found as a pattern; fit, checkpoints, summary's "Connected to"; and the errors.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "apps/model_zoo.h"
#include "test_util.h"

namespace ember {
namespace {

// The reference CNN (apps/model_zoo.h) as calls.
Model reference_graph() {
  SymbolicTensor x = Input(Shape{1, 28, 28});
  SymbolicTensor h = layer<Conv2D>(32, Size2{3, 3}, Activation::ReLU)(x);
  h = layer<MaxPool2D>(Size2{2, 2})(h);
  h = layer<Conv2D>(64, Size2{3, 3}, Activation::ReLU)(h);
  h = layer<MaxPool2D>(Size2{2, 2})(h);
  h = layer<Conv2D>(64, Size2{3, 3}, Activation::ReLU)(h);
  h = layer<Flatten>()(h);
  h = layer<Dense>(64, Activation::ReLU)(h);
  return Model(x, layer<Dense>(10)(h));
}

TEST(GraphModel, AStackBuiltAsAGraphIsTheSequentialBitForBit) {
  Sequential seq;
  apps::add_reference_cnn(seq);
  seq.build(Shape{1, 28, 28}, 7);
  Model graph = reference_graph();
  graph.build(7);
  EXPECT_TRUE(graph.is_linear());
  ASSERT_EQ(graph.num_params(), 93322);
  EXPECT_EQ(graph.params().to_vector(), seq.params().to_vector());  // the same initialisation
  for (size_t i = 0; i < seq.layers().size(); ++i) {
    EXPECT_EQ(graph.layers()[i]->name(), seq.layers()[i]->name());
    EXPECT_EQ(graph.fused_with_next(i), seq.fused_with_next(i)) << i;
    EXPECT_EQ(graph.layers()[i]->output_grad_premasked(), seq.layers()[i]->output_grad_premasked()) << i;
  }
  EXPECT_TRUE(graph.fused_with_next(0));  // the pattern found in the graph
  seq.compile(std::make_unique<Adam>());
  graph.compile(std::make_unique<Adam>());
  for (int step = 0; step < 3; ++step) {
    const Tensor x = test::random_tensor(Shape{80, 1, 28, 28}, 100 + step, 0.0f, 1.0f);  // 2 micro-batches
    Tensor labels = Tensor::zeros(Shape{80}, DType::I32);
    for (int i = 0; i < 80; ++i) labels.data<int32_t>()[i] = (i * 7 + step) % 10;
    EXPECT_EQ(graph.train_step(x, labels), seq.train_step(x, labels));
  }
  EXPECT_EQ(graph.params().to_vector(), seq.params().to_vector());
  const Tensor x = test::random_tensor(Shape{5, 1, 28, 28}, 9, 0.0f, 1.0f);
  EXPECT_EQ(graph.predict(x).to_vector(), seq.predict(x).to_vector());
}

// A residual block, a tensor read by three layers, a concatenation and a subtraction: every
// parameter's gradient against central differences of the loss.
Model branching_graph() {
  SymbolicTensor x = Input(Shape{2, 6, 6});
  SymbolicTensor h = layer<Conv2D>(3, Size2{3, 3}, Activation::ReLU, Padding::Same)(x);
  SymbolicTensor r = layer<Conv2D>(3, Size2{3, 3}, Activation::None, Padding::Same)(h);
  SymbolicTensor s = layer<ReLU>()(add({h, r}));  // y = relu(h + f(h))
  SymbolicTensor c = concatenate({s, h});         // h read a third time
  SymbolicTensor p = layer<MaxPool2D>(Size2{2, 2})(c);
  SymbolicTensor f = layer<Flatten>()(p);
  SymbolicTensor d1 = layer<Tanh>()(layer<Dense>(5)(f));
  SymbolicTensor d2 = layer<Dense>(5)(f);
  return Model(x, layer<Dense>(3)(multiply({subtract(d1, d2), d2})), "branching");
}

TEST(GraphModel, GradientsOfABranchingGraphMatchFiniteDifferences) {
  Model m = branching_graph();
  m.build(4);
  EXPECT_FALSE(m.is_linear());
  EXPECT_EQ(m.layers()[0]->type(), "Conv2D");
  EXPECT_FALSE(m.fused_with_next(0));  // the first conv's output has three readers: no fusion
  const Tensor x = test::random_tensor(Shape{3, 2, 6, 6}, 5);
  Tensor labels = Tensor::zeros(Shape{3}, DType::I32);
  labels.data<int32_t>()[1] = 2;
  labels.data<int32_t>()[2] = 1;
  m.compute_gradients(x, labels);
  const std::vector<float> analytic = m.grads().to_vector();
  SoftmaxCrossEntropy loss;
  test::GradCheckOptions opt;
  opt.step = 1e-3;  // as the Sequential's model check: smooth between kinks
  const test::GradCheckResult r = test::check_gradient(
      [&] { return double(loss.forward(m.forward(x, true), labels)); },
      std::span<float>(m.params().f32(), static_cast<size_t>(m.params().numel())), analytic, "branching", opt);
  EXPECT_GT(r.checked, m.num_params() * 3 / 4);
}

TEST(GraphModel, ATensorReadTwiceByOneLayerGetsBothGradients) {
  // add({h, h}) = 2h: the model equals one whose Dense kernel is doubled.
  SymbolicTensor x = Input(Shape{4});
  auto first = layer<Dense>(3);
  SymbolicTensor h = first(x);
  Model twice(x, layer<Dense>(2)(add({h, h})));
  twice.build(1);
  SymbolicTensor x2 = Input(Shape{4});
  Model once(x2, layer<Dense>(2)(layer<Dense>(3)(x2)));
  once.build(1);
  // once's first kernel and bias = twice's, doubled (exact in float): the same logits.
  Tensor packed = twice.pack_params_layout(twice.params());  // one value per parameter, in order
  for (int64_t i = 0; i < 15; ++i) packed.f32()[i] *= 2.0f;
  once.params().copy_from(once.unpack_params_layout(packed));
  const Tensor in = test::random_tensor(Shape{6, 4}, 3);
  Tensor labels = Tensor::zeros(Shape{6}, DType::I32);
  labels.data<int32_t>()[2] = 1;
  const float l_twice = twice.compute_gradients(in, labels), l_once = once.compute_gradients(in, labels);
  EXPECT_EQ(l_twice, l_once);
  const auto g2 = twice.pack_params_layout(twice.grads()).to_vector(),
             g1 = once.pack_params_layout(once.grads()).to_vector();
  // d/dW of twice = 2 * d/dW' of once (chain rule through the doubling): the input gradient of h
  // is the sum dy + dy = 2 dy, exactly.
  for (size_t i = 0; i < 15; ++i) EXPECT_EQ(g2[i], 2.0f * g1[i]) << i;
  for (size_t i = 15; i < g1.size(); ++i) EXPECT_EQ(g2[i], g1[i]) << i;
}

TEST(GraphModel, FitsEvaluatesAndRoundTripsThroughACheckpoint) {
  // A residual CNN on a separable problem (the Sequential test's corners).
  const auto make = [] {
    SymbolicTensor x = Input(Shape{1, 8, 8});
    SymbolicTensor h = layer<Conv2D>(4, Size2{3, 3}, Activation::ReLU, Padding::Same)(x);
    SymbolicTensor r = layer<Conv2D>(4, Size2{3, 3}, Activation::None, Padding::Same)(h);
    SymbolicTensor y = layer<MaxPool2D>(Size2{2, 2})(layer<ReLU>()(add({h, r})));
    return Model(x, layer<Dense>(2)(layer<Flatten>()(y)), "residual");
  };
  Model m = make();
  m.compile(std::make_unique<Adam>(AdamOptions{.learning_rate = 1e-2f}));
  const Dataset train = test::corner_dataset(512, 1), test = test::corner_dataset(256, 2);
  FitOptions opt;
  opt.epochs = 6;
  opt.batch_size = 16;
  opt.seed = 3;
  opt.verbose = 0;
  const History h = m.fit(train, opt, &test);
  EXPECT_LT(h.epochs.back().loss, 0.1 * h.epochs.front().loss);
  EXPECT_GT(*h.epochs.back().val_accuracy, 0.98);
  const std::string s = m.summary();
  EXPECT_NE(s.find("Model: \"residual\""), std::string::npos) << s;
  EXPECT_NE(s.find("input_1 (InputLayer)"), std::string::npos) << s;
  EXPECT_NE(s.find("Connected to"), std::string::npos) << s;
  EXPECT_NE(s.find("['conv2d[0][0]', 'conv2d_1[0][0]']"), std::string::npos) << s;  // the Add's inputs
  const std::string path = (std::filesystem::temp_directory_path() / "ember_graph_model.safetensors").string();
  m.save(path);
  Model again = make();
  again.build(99);
  again.load(path);
  EXPECT_EQ(again.params().to_vector(), m.params().to_vector());
  const EvalResult a = m.evaluate(test), b = again.evaluate(test);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.accuracy, b.accuracy);
  std::filesystem::remove(path);
}

// A layer's views point into one model's buffers: a second model built over the same layers (a
// Keras habit: Model(x, features) and Model(x, logits)) is refused, not left training on the
// other's weights; once the first model is gone the layers may serve another.
TEST(GraphModel, ALayerServesOneModelAtATime) {
  SymbolicTensor x = Input(Shape{4});
  SymbolicTensor features = layer<Dense>(3)(x);
  SymbolicTensor logits = layer<Dense>(2)(features);
  {
    Model whole(x, logits);
    whole.build(1);
    Model head(x, features);
    try {
      head.build(1);
      FAIL() << "a layer bound into two models";
    } catch (const ArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("belongs to another built model"), std::string::npos) << e.what();
    }
    EXPECT_THROW(call_layer(whole.layers()[0], {x}), ArgumentError);  // nor called again
    Model moved = std::move(whole);                                   // the model's identity moves with it
    Model again(x, logits);
    EXPECT_THROW(again.build(1), ArgumentError);
  }
  Model later(x, logits);  // both models gone: free again
  EXPECT_NO_THROW(later.build(1));
}

// The model input's gradient from backward(): whole when every reader of the input computes its
// part, none (undefined) when one does not (a first layer skips it), never a partial sum.
TEST(GraphModel, TheInputGradientIsWholeOrNone) {
  SymbolicTensor x = Input(Shape{4});
  auto f = layer<Dense>(4);
  Model m(x, layer<Dense>(2)(add({x, f(x)})));
  m.build(1);
  const Tensor in = test::random_tensor(Shape{3, 4}, 2), dy = test::random_tensor(Shape{3, 2}, 3);
  m.forward(in, true);
  EXPECT_FALSE(m.backward_layers(dy, 0, m.layers().size()).defined());  // f skips its input gradient
  f->set_needs_input_grad(true);
  m.forward(in, true);
  const std::vector<float> whole = m.backward_layers(dy, 0, m.layers().size()).to_vector();
  // d/dx = dh + f's input gradient, dh = the Add's output gradient = the last Dense's dx.
  Dense& last = static_cast<Dense&>(*m.layers()[2]);
  const std::vector<float> dh = last.backward(dy).to_vector();
  const std::vector<float> df = f->backward(Tensor::from_vector(Shape{3, 4}, dh)).to_vector();
  ASSERT_EQ(whole.size(), dh.size());
  for (size_t i = 0; i < whole.size(); ++i) EXPECT_EQ(whole[i], df[i] + dh[i]) << i;  // one rounding, either order
}

TEST(GraphModel, RefusesGraphsItCannotRun) {
  SymbolicTensor x = Input(Shape{4}), other = Input(Shape{4}, "other");
  SymbolicTensor y = layer<Dense>(2)(x);
  EXPECT_THROW(Model(other, y), ArgumentError);  // y does not come from `other`
  try {
    Model(x, add({y, layer<Dense>(2)(other)}));
    FAIL() << "an output reading another Input";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("'other'"), std::string::npos) << e.what();
  }
  auto shared = layer<Dense>(4);
  Model tied(x, shared(shared(x)));  // one layer, two calls: the second shares the first's weights
  tied.build(0);
  EXPECT_EQ(tied.num_params(), 20);                     // once (tests/layers/test_shared_layers.cpp)
  EXPECT_THROW(Model({x, other}, {y}), ArgumentError);  // an input that reaches no output
  EXPECT_THROW(Model(x, x), ArgumentError);             // no layer
  EXPECT_THROW(layer<Dense>(3)(SymbolicTensor()), ArgumentError);
  try {
    add({y, layer<Dense>(3)(x)});
    FAIL() << "adding (2,) and (3,)";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("calling Add"), std::string::npos) << e.what();
  }
  Model ok(x, y);
  EXPECT_THROW(ok.build(Shape{5}, 0), ShapeError);  // the input is (4,)
  ok.build(0);
  Model graph = branching_graph();
  graph.build(0);
  const Tensor h = test::random_tensor(Shape{2, 3, 6, 6}, 1);
  EXPECT_THROW(graph.forward_layers(h, false, 1, 2), ArgumentError);  // ranges: stacks only
  EXPECT_THROW(graph.backward_layers(h, 1, 2), ArgumentError);
}

}  // namespace
}  // namespace ember
