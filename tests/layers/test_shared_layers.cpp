// Shared layers (layers/model/graph.h): a layer object called again runs a twin with the first
// call's parameters and state; the model sums the calls' gradients. Against the same model made of
// separate layers with tied values (bit for bit), finite differences, checkpoints and load_model,
// the summary, replicas, and the errors.
#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.h"

namespace ember {
namespace {

Tensor labels_of(int64_t n, int classes) {
  Tensor labels = Tensor::zeros(Shape{n}, DType::I32);
  for (int64_t i = 0; i < n; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>((i * 5) % classes);
  return labels;
}

// A siamese pair: one tower (Dense + ReLU) on two inputs, the two embeddings concatenated.
Model siamese() {
  SymbolicTensor a = Input(Shape{4}, "left"), b = Input(Shape{4}, "right");
  auto tower = layer<Dense>(3, Activation::ReLU);
  tower->set_name("tower");
  return Model({a, b}, {layer<Dense>(2)(concatenate({tower(a), tower(b)}))}, "siamese");
}

// The same graph with two towers (separate layers).
Model two_towers() {
  SymbolicTensor a = Input(Shape{4}, "left"), b = Input(Shape{4}, "right");
  return Model(
      {a, b},
      {layer<Dense>(2)(concatenate({layer<Dense>(3, Activation::ReLU)(a), layer<Dense>(3, Activation::ReLU)(b)}))});
}

std::vector<float> values_of(const Model& m, const std::string& name, bool grads) {
  const std::vector<float> all = grads ? Tensor(const_cast<Model&>(m).grads()).to_vector() : m.params().to_vector();
  std::vector<float> out;
  int64_t offset = 0;
  for (const auto& [n, p] : m.named_params()) {
    if (n.rfind(name + "/", 0) == 0) out.insert(out.end(), all.begin() + offset, all.begin() + offset + p.numel());
    offset += Model::aligned_view(p.numel());  // views start on 256-byte boundaries of the buffer
  }
  return out;
}

// Tied by hand: the two-tower model with its second tower holding the first's values computes the
// same logits, and its two towers' gradients, added in float, are the shared tower's bit for bit.
TEST(SharedLayers, ASharedTowerIsTwoTiedTowersWhoseGradientsAreSummed) {
  Model shared = siamese();
  shared.build(3);
  Model tied = two_towers();
  tied.build(3);
  EXPECT_EQ(shared.num_params(), 15 + 14);  // one tower (4*3 + 3) and the head (6*2 + 2)
  EXPECT_EQ(tied.num_params(), 2 * 15 + 14);
  EXPECT_TRUE(shared.is_twin(1) || shared.is_twin(2));
  // tied's parameters: dense (tower 1), dense_1 (tower 2), dense_2 (head) from shared's.
  const std::vector<float> tower = values_of(shared, "tower", false), head = values_of(shared, "dense", false);
  std::vector<float> p = tower;
  p.insert(p.end(), tower.begin(), tower.end());
  p.insert(p.end(), head.begin(), head.end());
  ASSERT_EQ(p.size(), static_cast<size_t>(tied.num_params()));
  tied.params().copy_from(tied.unpack_params_layout(Tensor::from_vector(Shape{static_cast<int64_t>(p.size())}, p)));
  const std::vector<Tensor> xs{test::random_tensor(Shape{6, 4}, 1), test::random_tensor(Shape{6, 4}, 2)};
  const Tensor labels = labels_of(6, 2);
  MetricSums s1 = shared.make_sums(), s2 = tied.make_sums();
  shared.compute_gradients(xs, labels, s1);
  tied.compute_gradients(xs, labels, s2);
  EXPECT_EQ(s1.read().loss_sum, s2.read().loss_sum);  // the same logits
  const std::vector<float> g1 = values_of(tied, "dense", true), g2 = values_of(tied, "dense_1", true);
  const std::vector<float> g = values_of(shared, "tower", true);
  ASSERT_EQ(g.size(), g1.size());
  // The tower's first call in run order is tied's "dense"; its gradient plus the later call's.
  for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(g[i], g1[i] + g2[i]) << i;
  EXPECT_EQ(values_of(shared, "dense", true), values_of(tied, "dense_2", true));  // the head
  bool both_calls_count = false;  // the sum differs from either call alone somewhere
  for (size_t i = 0; i < g.size(); ++i) both_calls_count = both_calls_count || (g1[i] != 0 && g2[i] != 0);
  EXPECT_TRUE(both_calls_count);
}

TEST(SharedLayers, GradientsMatchFiniteDifferences) {
  // A shared convolution on two images of different sizes (one kernel fits both) and a shared
  // Dense applied twice in a row (a tied stack), joined.
  SymbolicTensor a = Input(Shape{1, 6, 6}), b = Input(Shape{1, 8, 8});
  auto conv = layer<Conv2D>(2, Size2{3, 3}, Activation::ReLU);
  SymbolicTensor fa = layer<GlobalAvgPool2D>()(conv(a)), fb = layer<GlobalAvgPool2D>()(conv(b));
  auto d = layer<Dense>(2);
  SymbolicTensor h = layer<Tanh>()(d(layer<Tanh>()(d(add({fa, fb})))));
  Model m({a, b}, {layer<Dense>(3)(h)});
  m.build(5);
  const std::vector<Tensor> xs{test::random_tensor(Shape{3, 1, 6, 6}, 3), test::random_tensor(Shape{3, 1, 8, 8}, 4)};
  const Tensor labels = labels_of(3, 3);
  MetricSums sums = m.make_sums();
  m.compute_gradients(xs, labels, sums);
  const std::vector<float> analytic = m.grads().to_vector();
  losses::SparseCategoricalCrossentropy loss;
  test::GradCheckOptions opt;
  opt.step = 1e-3;
  const test::GradCheckResult r = test::check_gradient(
      [&] { return double(loss.value(m.forward(xs, true), labels)); },
      std::span<float>(m.params().f32(), static_cast<size_t>(m.params().numel())), analytic, "shared", opt);
  EXPECT_GT(r.checked, m.num_params() * 3 / 4);
}

TEST(SharedLayers, TrainSaveRecreateAndSummarise) {
  const int64_t n = 128;
  const Tensor left = test::random_tensor(Shape{n, 4}, 5), right = test::random_tensor(Shape{n, 4}, 6);
  Tensor same = Tensor::empty(Shape{n}, DType::I32);  // is left's first value the larger?
  for (int64_t i = 0; i < n; ++i) same.data<int32_t>()[i] = left.f32()[i * 4] > right.f32()[i * 4] ? 1 : 0;
  const Dataset data = Dataset::from_inputs({{.name = "left", .values = left}, {.name = "right", .values = right}},
                                            same, {.num_classes = 2});
  Model m = siamese();
  m.compile(std::make_unique<Adam>(AdamOptions{.learning_rate = 1e-2f}));
  FitOptions opt;
  opt.epochs = 20;
  opt.batch_size = 16;
  opt.seed = 1;
  opt.verbose = 0;
  const History h = m.fit(data, opt);
  EXPECT_LT(h.epochs.back().loss, 0.5 * h.epochs.front().loss);
  const std::string s = m.summary();
  EXPECT_NE(s.find("shared"), std::string::npos) << s;
  EXPECT_NE(s.find("['tower[0][0]', 'tower[1][0]']"), std::string::npos) << s;  // the concatenation's inputs
  EXPECT_NE(s.find("Total params: 29"), std::string::npos) << s;
  const std::string path = (std::filesystem::temp_directory_path() / "ember_shared_layers.safetensors").string();
  m.save(path);
  std::unique_ptr<Model> again = load_model(path);
  EXPECT_EQ(again->num_params(), m.num_params());
  EXPECT_EQ(again->summary(), m.summary());
  EXPECT_EQ(again->predict({left, right}).to_vector(), m.predict({left, right}).to_vector());
  Model rebuilt = siamese();
  rebuilt.build(9);
  rebuilt.load(path);  // the same architecture, built in code
  EXPECT_EQ(rebuilt.params().to_vector(), m.params().to_vector());
  Model separate = two_towers();
  separate.build(9);
  EXPECT_THROW(separate.load(path), CheckpointError);  // two towers are another architecture
  std::filesystem::remove(path);
}

// A shared BatchNormalization shares its moving statistics too (one set, in the state buffer once).
TEST(SharedLayers, AShareOfBatchNormalizationSharesItsStatistics) {
  SymbolicTensor a = Input(Shape{3}), b = Input(Shape{3});
  auto bn = layer<BatchNormalization>();
  Model m({a, b}, {layer<Dense>(2)(add({bn(a), bn(b)}))});
  m.build(1);
  EXPECT_EQ(m.named_state().size(), 2u);  // moving mean and variance, once
  size_t first = 0, twin = 0;
  for (size_t i = 0; i < m.layers().size(); ++i)
    if (m.layers()[i]->type() == "BatchNormalization") (m.is_twin(i) ? twin : first) = i;
  ASSERT_NE(first, twin);
  EXPECT_EQ(m.layers()[twin]->state()[0].raw(), m.layers()[first]->state()[0].raw());
  // Training moves the one set of statistics with both calls' batches (each call updates it).
  const std::vector<float> before = m.state().to_vector();
  m.compile(std::make_unique<Adam>());
  MetricSums sums = m.make_sums();
  m.compute_gradients(std::vector<Tensor>{test::random_tensor(Shape{8, 3}, 1), test::random_tensor(Shape{8, 3}, 2)},
                      labels_of(8, 2), sums);
  EXPECT_NE(m.state().to_vector(), before);
}

// Replicas of a model with a shared tower equal the one model bit for bit (Exact), as any graph's.
TEST(SharedLayers, MirroredReplicasEqualOneModel) {
  const int64_t n = 128;
  const Dataset d = Dataset::from_inputs({{.name = "left", .values = test::random_tensor(Shape{n, 4}, 1)},
                                          {.name = "right", .values = test::random_tensor(Shape{n, 4}, 2)}},
                                         labels_of(n, 2));
  const auto train = [&](std::unique_ptr<Strategy> s) {
    ModelRecipe r;
    r.make_model = [] { return std::make_unique<Model>(siamese()); };
    r.seed = 4;
    r.make_optimizer = [] { return std::make_unique<Adam>(); };
    s->build(r);
    FitOptions o;
    o.batch_size = 32;
    o.max_steps = 4;
    o.verbose = 0;
    s->fit(d, o);
    return s->model().params().to_vector();
  };
  const test::ConvAlgorithmsScope exact(ConvAlgorithms::Exact);
  const std::vector<float> one = train(make_default_strategy());
  EXPECT_EQ(train(make_mirrored_cpu_strategy(2)), one);
}

// A later call that runs before the first (in run order) owns the parameters, as load_model
// recreates it from the file's order: a resumed run continues bit for bit (Adam's moments are
// flat buffers), and outputs that are calls of one shared layer have names of their own.
TEST(SharedLayers, RunOrderDecidesTheOwnerAndAResumeContinuesBitForBit) {
  SymbolicTensor a = Input(Shape{4}, "a"), b = Input(Shape{4}, "b"), c = Input(Shape{3}, "c");
  auto tower = layer<Dense>(3, Activation::ReLU);
  tower->set_name("tower");
  SymbolicTensor ya = tower(a), yb = tower(b);
  Model m({a, b, c}, {layer<Dense>(2)(concatenate({yb, layer<Dense>(2)(c), ya}))});
  m.build(2);
  EXPECT_TRUE(m.is_twin(2));   // the call on a runs third (after b's and c's Dense)
  EXPECT_FALSE(m.is_twin(0));  // b's call runs first: it owns the tower
  EXPECT_EQ(m.layers()[0]->name(), "tower");
  m.compile(std::make_unique<Adam>());
  const std::vector<Tensor> xs{test::random_tensor(Shape{8, 4}, 1), test::random_tensor(Shape{8, 4}, 2),
                               test::random_tensor(Shape{8, 3}, 3)};
  MetricSums sums = m.make_sums();
  for (int step = 0; step < 2; ++step) m.train_step(xs, labels_of(8, 2), sums);
  const std::string path = (std::filesystem::temp_directory_path() / "ember_shared_order.safetensors").string();
  m.save(path);
  std::unique_ptr<Model> again = load_model(path);
  EXPECT_EQ(again->summary(), m.summary());
  again->compile(std::make_unique<Adam>());  // the file's Adam state
  MetricSums s2 = again->make_sums();
  m.train_step(xs, labels_of(8, 2), sums);
  again->train_step(xs, labels_of(8, 2), s2);
  EXPECT_EQ(again->params().to_vector(), m.params().to_vector());
  // Two outputs that are two calls of one layer: "tower" and "tower[1]".
  auto tower2 = layer<Dense>(3);
  tower2->set_name("tower");
  Model pair({a, b}, {tower2(a), tower2(b)});
  pair.build(1);
  EXPECT_EQ(pair.output_names(), (std::vector<std::string>{"tower", "tower[1]"}));
  pair.save(path);
  EXPECT_EQ(load_model(path)->output_names(), pair.output_names());
  std::filesystem::remove(path);
}

// --- Nesting: a model called as a layer ------------------------------------------------------------

// A Sequential encoder called on two inputs is the shared tower written out layer by layer: the
// same initialisation, loss and gradients bit for bit, its layers named "encoder/...".
TEST(Nesting, ASequentialCalledTwiceIsASharedTower) {
  const auto nested = [] {
    Sequential encoder("encoder");
    encoder.add<Dense>(5, Activation::ReLU);
    encoder.add<Dense>(3);
    SymbolicTensor a = Input(Shape{4}), b = Input(Shape{4});
    return Model({a, b}, {layer<Dense>(2)(concatenate({encoder(a), encoder(b)}))});
  };
  const auto written_out = [] {
    auto d1 = layer<Dense>(5, Activation::ReLU);
    auto d2 = layer<Dense>(3);
    SymbolicTensor a = Input(Shape{4}), b = Input(Shape{4});
    return Model({a, b}, {layer<Dense>(2)(concatenate({d2(d1(a)), d2(d1(b))}))});
  };
  Model m = nested(), w = written_out();
  m.build(4);
  w.build(4);
  EXPECT_EQ(m.num_params(), w.num_params());
  EXPECT_EQ(m.params().to_vector(), w.params().to_vector());
  EXPECT_EQ(m.layers()[0]->name(), "encoder/dense");
  EXPECT_EQ(m.layers()[1]->name(), "encoder/dense_1");
  EXPECT_EQ(m.named_params()[0].first, "encoder/dense/kernel");
  const std::vector<Tensor> xs{test::random_tensor(Shape{6, 4}, 1), test::random_tensor(Shape{6, 4}, 2)};
  MetricSums s1 = m.make_sums(), s2 = w.make_sums();
  m.compute_gradients(xs, labels_of(6, 2), s1);
  w.compute_gradients(xs, labels_of(6, 2), s2);
  EXPECT_EQ(s1.read().loss_sum, s2.read().loss_sum);
  EXPECT_EQ(m.grads().to_vector(), w.grads().to_vector());
}

// A graph block nested once: its layers join the outer model (prefixed), which trains, saves and
// is recreated by load_model; a built model cannot be nested, nor inputs of another shape.
TEST(Nesting, AGraphBlockInsideAModelTrainsAndRoundTrips) {
  const auto make = [] {
    SymbolicTensor x = Input(Shape{6});
    SymbolicTensor h = layer<Dense>(6, Activation::ReLU)(x);
    Model block(x, add({x, layer<Dense>(6)(h)}), "block");  // a residual block
    SymbolicTensor in = Input(Shape{6});
    return Model(in, layer<Dense>(2)(block(in)), "outer");
  };
  Model m = make();
  m.compile(std::make_unique<Adam>(AdamOptions{.learning_rate = 1e-2f}));
  const Tensor x = test::random_tensor(Shape{64, 6}, 3);
  Tensor y = Tensor::empty(Shape{64}, DType::I32);
  for (int64_t i = 0; i < 64; ++i) y.data<int32_t>()[i] = x.f32()[i * 6] + x.f32()[i * 6 + 1] > 0 ? 1 : 0;
  FitOptions opt;
  opt.epochs = 15;
  opt.batch_size = 16;
  opt.verbose = 0;
  const History h = m.fit(Dataset::from_tensors(x, y, {.num_classes = 2}), opt);
  EXPECT_LT(h.epochs.back().loss, 0.5 * h.epochs.front().loss);
  EXPECT_NE(m.summary().find("block/add (Add)"), std::string::npos) << m.summary();
  const std::string path = (std::filesystem::temp_directory_path() / "ember_nested.safetensors").string();
  m.save(path);
  std::unique_ptr<Model> again = load_model(path);
  EXPECT_EQ(again->predict(x).to_vector(), m.predict(x).to_vector());
  std::filesystem::remove(path);
  // A graph block called twice in a row: the second call shares the first's weights, and the
  // gradients of both calls reach them (finite differences).
  SymbolicTensor bx2 = Input(Shape{3});
  Model block2(bx2, add({bx2, layer<Tanh>()(layer<Dense>(3)(bx2))}), "res");
  SymbolicTensor in2 = Input(Shape{3});
  Model chain(in2, layer<Dense>(2)(block2(block2(in2))));
  chain.build(7);
  EXPECT_EQ(chain.num_params(), 12 + 8);  // the block's Dense once, the head
  const Tensor x2 = test::random_tensor(Shape{4, 3}, 8);
  chain.compute_gradients(x2, labels_of(4, 2));
  const std::vector<float> analytic = chain.grads().to_vector();
  losses::SparseCategoricalCrossentropy ce;
  test::GradCheckOptions go;
  go.step = 1e-3;
  const test::GradCheckResult r = test::check_gradient(
      [&] { return double(ce.value(chain.forward(x2, true), labels_of(4, 2))); },
      std::span<float>(chain.params().f32(), static_cast<size_t>(chain.params().numel())), analytic, "chain", go);
  EXPECT_GT(r.checked, chain.num_params() * 3 / 4);
  // Refusals: a built model called twice (its layers join one new model); inputs of another shape.
  SymbolicTensor in = Input(Shape{6});
  EXPECT_NO_THROW(m(in));
  EXPECT_THROW(m(Input(Shape{6})), ArgumentError);
  SymbolicTensor bx = Input(Shape{6});
  Model block(bx, layer<Dense>(2)(bx), "small");
  EXPECT_THROW(block(Input(Shape{5})), ShapeError);
}

// Sharing across nesting: a nested model's shared layer called again outside it (a twin of a
// twin), a shared layer named after its model was made, a failed nesting undone, a shared
// parameterless layer split by a backward range.
TEST(Nesting, SharingAcrossNestingAndNamingLate) {
  SymbolicTensor x = Input(Shape{4}), y = Input(Shape{4});
  auto t = layer<Dense>(3);
  SymbolicTensor tx = t(x), ty = t(y);
  Model m({x, y}, {concatenate({ty, tx})}, "pair");  // t's call on y runs first: a registry twin owns it
  SymbolicTensor u = Input(Shape{4}), v = Input(Shape{4});
  Model o({u, v}, {layer<Dense>(2)(concatenate(std::vector<SymbolicTensor>{m({u, v})[0], t(u)}))});
  o.build(3);
  EXPECT_EQ(o.num_params(), 15 + 20);                         // t once (4*3 + 3), the head (9*2 + 2)
  EXPECT_EQ(o.named_params()[0].first, "pair/dense/kernel");  // named when "pair" was nested
  const std::vector<Tensor> xs{test::random_tensor(Shape{3, 4}, 1), test::random_tensor(Shape{3, 4}, 2)};
  o.compute_gradients(xs, labels_of(3, 2), *std::make_unique<MetricSums>(o.make_sums()));
  const std::vector<float> analytic = o.grads().to_vector();
  losses::SparseCategoricalCrossentropy ce;
  test::GradCheckOptions go;
  go.step = 1e-3;
  const test::GradCheckResult r = test::check_gradient(
      [&] { return double(ce.value(o.forward(xs, true), labels_of(3, 2))); },
      std::span<float>(o.params().f32(), static_cast<size_t>(o.params().numel())), analytic, "three calls", go);
  EXPECT_GT(r.checked, o.num_params() * 3 / 4);
  // A shared layer named after its model was made (before build): the name holds, though a
  // registry twin owns the parameters (its call runs first).
  SymbolicTensor a = Input(Shape{4}), b = Input(Shape{4});
  auto t2 = layer<Dense>(3);
  SymbolicTensor ya = t2(a), yb = t2(b);
  Model late({a, b}, {concatenate({yb, ya})});
  t2->set_name("tower");
  late.build(1);
  EXPECT_EQ(late.named_params()[0].first, "tower/kernel");
  EXPECT_EQ(t2->name(), "tower");
  // A nesting that fails leaves the block as it was: the retry names its layers once.
  Sequential enc("enc");
  enc.add<Dense>(4);
  enc.add<Dense>(2);
  EXPECT_THROW(enc(Input(Shape{1, 6, 6})), ShapeError);  // Dense takes (features,)
  SymbolicTensor w = Input(Shape{5});
  Model ok(w, enc(w));
  ok.build(1);
  EXPECT_EQ(ok.layers()[0]->name(), "enc/dense");
  EXPECT_EQ(ok.layers()[1]->name(), "enc/dense_1");
  // A ReLU object used twice in a stack: nothing to sum, so a range may split its calls.
  SymbolicTensor z = Input(Shape{4});
  auto relu = layer<ReLU>();
  Model stack(z, relu(layer<Dense>(4)(relu(z))));
  stack.build(0);
  const Tensor g = test::random_tensor(Shape{2, 4}, 1);
  stack.forward(g, true);
  EXPECT_NO_THROW(stack.backward_layers(g, 1, 3));
}

TEST(SharedLayers, RefusesWhatCannotBeShared) {
  SymbolicTensor a = Input(Shape{4}), b = Input(Shape{5});
  auto d = layer<Dense>(3);
  d(a);
  EXPECT_THROW(d(b), ShapeError);  // a kernel (5, 3) cannot be the first call's (4, 3)
  // The first call is not part of the model: whose parameters would the twin use?
  SymbolicTensor c = Input(Shape{4});
  auto e = layer<Dense>(2);
  e(a);
  SymbolicTensor y = e(c);
  EXPECT_THROW(Model(c, y), ArgumentError);
  // A range of a stack that holds one call of a shared layer but not the other.
  SymbolicTensor v = Input(Shape{4});
  auto same = layer<Dense>(4);
  Model tied(v, same(same(v)));
  tied.build(0);
  ASSERT_TRUE(tied.is_linear());
  const Tensor g = test::random_tensor(Shape{2, 4}, 1);
  tied.forward(g, true);
  EXPECT_THROW(tied.backward_layers(g, 1, 2), ArgumentError);
  tied.backward_layers(g, 0, 2);  // both calls: fine
  // "[" is kept for the calls' names.
  SymbolicTensor w = Input(Shape{4});
  auto odd = layer<Dense>(2);
  odd->set_name("odd[1]");
  Model bad(w, odd(w));
  EXPECT_THROW(bad.build(0), ArgumentError);
  // A layer the registry cannot make cannot be called again.
  class Unregistered : public Layer {
   public:
    std::string type() const override { return "UnregisteredForSharing"; }
    Shape build(const Shape& s) override { return s; }

   protected:
    const Tensor& do_forward(const Tensor& x, bool) override { return x; }
    const Tensor& do_backward(const Tensor& dy) override { return dy; }
  };
  auto u = std::make_shared<Unregistered>();
  call_layer(u, {a});
  try {
    call_layer(u, {c});
    ADD_FAILURE() << "called an unregistered layer again";
  } catch (const ArgumentError& err) {
    EXPECT_NE(std::string(err.what()).find("registry"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace ember
