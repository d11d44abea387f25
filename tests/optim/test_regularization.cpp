// Gradient clipping, decoupled weight decay (AdamW, SGD), RMSprop, the model's decay mask and the
// strategies' clipping after the all-reduce: against hand-computed steps in double.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>

#include "idx_fixtures.h"
#include "test_util.h"

namespace ember {
namespace {

Tensor vec(std::vector<float> v) { return Tensor::from_vector(Shape{static_cast<int64_t>(v.size())}, v); }

TEST(AdamW, DecaysDecoupledThenStepsAsAdam) {
  // PyTorch's and Keras' AdamW: p -= lr wd p, then Adam's update (Keras' epsilon placement).
  AdamW opt(AdamWOptions{.learning_rate = 1e-2f, .weight_decay = 0.1f});
  EXPECT_EQ(opt.name(), "AdamW");
  Tensor p = vec({1.0f, -2.0f});
  const std::vector<std::vector<float>> grads{{0.5f, -1.0f}, {0.1f, 3.0f}, {-0.2f, 0.0f}};
  double m[2] = {0, 0}, v[2] = {0, 0}, ref[2] = {1.0, -2.0};
  for (size_t t = 1; t <= grads.size(); ++t) {
    opt.step(p, vec(grads[t - 1]));
    const double lr_t = 1e-2 * std::sqrt(1 - std::pow(0.999, double(t))) / (1 - std::pow(0.9, double(t)));
    for (int i = 0; i < 2; ++i) {
      const double g = grads[t - 1][static_cast<size_t>(i)];
      ref[i] -= 1e-2 * 0.1 * ref[i];
      m[i] = 0.9 * m[i] + 0.1 * g;
      v[i] = 0.999 * v[i] + 0.001 * g * g;
      ref[i] -= lr_t * m[i] / (std::sqrt(v[i]) + 1e-7);
    }
    // float parameters near 1 carry ~6e-8 of rounding per operation, two operations per step.
    EXPECT_NEAR(p.f32()[0], ref[0], 1e-6) << "step " << t;
    EXPECT_NEAR(p.f32()[1], ref[1], 1e-6) << "step " << t;
  }
  // The decay is what moved it off plain Adam's path: Adam alone ends elsewhere by ~lr wd |p|.
  Adam adam(AdamOptions{.learning_rate = 1e-2f});
  Tensor q = vec({1.0f, -2.0f});
  for (const auto& g : grads) adam.step(q, vec(g));
  EXPECT_GT(std::fabs(q.f32()[1] - p.f32()[1]), 5e-3);
}

TEST(Regularization, TheDecayMaskSparesWhatItSays) {
  // Zero gradients: SGD moves nothing, so each parameter changes by the decay alone, exactly
  // p * (1 - lr wd) in float where the mask is 1.
  SGD sgd(SGDOptions{.learning_rate = 0.5f, .weight_decay = 0.25f});
  sgd.set_decay_mask(vec({1.0f, 0.0f, 1.0f}));
  Tensor p = vec({2.0f, 2.0f, -4.0f});
  sgd.step(p, vec({0.0f, 0.0f, 0.0f}));
  EXPECT_EQ(p.to_vector(), (std::vector<float>{2.0f - 0.125f * 2.0f, 2.0f, -4.0f + 0.125f * 4.0f}));
  sgd.set_decay_mask(vec({1.0f, 0.0f}));  // the wrong size is named at the next step
  EXPECT_THROW(sgd.step(p, vec({0.0f, 0.0f, 0.0f})), ShapeError);
  EXPECT_THROW(SGD(SGDOptions{.weight_decay = -1.0f}), ArgumentError);
  EXPECT_THROW(Adam(AdamOptions{.global_clipnorm = std::numeric_limits<float>::infinity()}), ArgumentError);
}

TEST(Regularization, ClippingByValueThenByGlobalNorm) {
  // Plain SGD with lr 1: the parameters move by minus the clipped gradient, which the step
  // leaves in the gradient buffer.
  SGD by_value(SGDOptions{.learning_rate = 1.0f, .clipvalue = 1.0f});
  Tensor p = vec({0.0f, 0.0f, 0.0f});
  Tensor g = vec({5.0f, -5.0f, 0.5f});
  by_value.step(p, g);
  EXPECT_EQ(g.to_vector(), (std::vector<float>{1.0f, -1.0f, 0.5f}));
  EXPECT_EQ(p.to_vector(), (std::vector<float>{-1.0f, 1.0f, -0.5f}));

  SGD by_norm(SGDOptions{.learning_rate = 1.0f, .global_clipnorm = 1.0f});
  Tensor q = vec({0.0f, 0.0f});
  Tensor h = vec({3.0f, 4.0f});  // norm 5: scaled by 1/5
  by_norm.step(q, h);
  EXPECT_FLOAT_EQ(h.f32()[0], 0.6f);
  EXPECT_FLOAT_EQ(h.f32()[1], 0.8f);
  Tensor small = vec({0.3f, 0.4f});  // norm 0.5: under the bar, untouched bit for bit
  by_norm.step(q, small);
  EXPECT_EQ(small.to_vector(), (std::vector<float>{0.3f, 0.4f}));
  Tensor bad = vec({std::numeric_limits<float>::quiet_NaN(), 1.0f});  // a NaN norm poisons all (TF)
  by_norm.step(q, bad);
  EXPECT_TRUE(std::isnan(bad.f32()[1]));
  Tensor inf = vec({std::numeric_limits<float>::infinity(), 1.0f});  // an infinite norm: NaN too, not
  by_norm.step(q, inf);                                              // c / inf = 0, a silently skipped step
  EXPECT_TRUE(std::isnan(inf.f32()[1]));
  Tensor big = vec({3e38f, 3e38f});  // finite floats whose norm only a double holds: clipped normally
  by_norm.step(q, big);
  EXPECT_FLOAT_EQ(big.f32()[0], static_cast<float>(1.0 / std::sqrt(2.0)));
}

TEST(RMSprop, MatchesHandComputedSteps) {
  RMSprop opt(RmspropOptions{.learning_rate = 1e-2f});
  Tensor p = vec({1.0f, -2.0f});
  const std::vector<std::vector<float>> grads{{0.5f, -1.0f}, {0.1f, 3.0f}, {-0.2f, 0.0f}};
  double v[2] = {0, 0}, ref[2] = {1.0, -2.0};
  for (const auto& g : grads) {
    opt.step(p, vec(g));
    for (int i = 0; i < 2; ++i) {
      const double gi = g[static_cast<size_t>(i)];
      v[i] = 0.9 * v[i] + 0.1 * gi * gi;
      ref[i] -= 1e-2 * gi / std::sqrt(v[i] + 1e-7);  // Keras: epsilon inside the root
    }
    EXPECT_NEAR(p.f32()[0], ref[0], 1e-6);
    EXPECT_NEAR(p.f32()[1], ref[1], 1e-6);
  }
  EXPECT_EQ(opt.state()[0].first, "v");
  EXPECT_THROW(RMSprop(RmspropOptions{.rho = 1.0f}), ArgumentError);
}

TEST(Regularization, AModelDecaysKernelsNotBiasesOrNormalisation) {
  Sequential m;
  m.add<Dense>(3);
  m.add<BatchNormalization>();
  m.add<Dense>(2);
  m.build(Shape{4}, 1);
  const std::vector<float> mask = m.pack_params_layout(m.decay_mask()).to_vector();  // without the padding (0 too)
  // dense: kernel 12, bias 3; batch_normalization: gamma 3, beta 3; dense_1: kernel 6, bias 2.
  std::vector<float> want(29, 0.0f);
  std::fill(want.begin(), want.begin() + 12, 1.0f);
  std::fill(want.begin() + 21, want.begin() + 27, 1.0f);
  EXPECT_EQ(mask, want);
  m.set_weight_decay("dense_1/bias", true);
  m.set_weight_decay("dense/kernel", false);
  const std::vector<float> changed = m.decay_mask().to_vector();
  EXPECT_EQ(std::count(changed.begin(), changed.end(), 1.0f), 8);  // dense_1's kernel and bias
  EXPECT_THROW(m.set_weight_decay("dense/gamma", true), ArgumentError);

  // Training with AdamW hands the optimizer this mask.
  m.compile(std::make_unique<AdamW>(), std::make_unique<losses::MeanSquaredError>());
  m.train_step(test::random_tensor(Shape{8, 4}, 2), test::random_tensor(Shape{8, 2}, 3));
  ASSERT_TRUE(m.optimizer()->decay_mask().defined());
  EXPECT_EQ(m.optimizer()->decay_mask().to_vector(), changed);
}

// A sequence model decays its matrices and tables (nanoGPT's rule): the embedding tables and
// MultiHeadAttention's kernels, not its biases nor LayerNormalization's gamma and beta.
TEST(Regularization, ASequenceModelDecaysItsTablesAndAttentionKernels) {
  SymbolicTensor ids = Input(Shape{4}, "ids");
  SymbolicTensor h = layer<PositionEmbedding>(4)(layer<Embedding>(5, 6)(ids));
  h = layer<MultiHeadAttention>(2, 3)(layer<LayerNormalization>()(h));
  Model m(ids, h, "seq");
  m.build(1);
  const std::vector<float> mask = m.pack_params_layout(m.decay_mask()).to_vector();
  // embedding 30, position_embedding 24, layer_normalization 6 + 6, attention: qkv_kernel 18 x 6,
  // qkv_bias 18, output_kernel 6 x 6, output_bias 6.
  std::vector<float> want;
  for (const auto& [n, on] : std::vector<std::pair<int, float>>{
           {30, 1.0f}, {24, 1.0f}, {12, 0.0f}, {108, 1.0f}, {18, 0.0f}, {36, 1.0f}, {6, 0.0f}})
    want.insert(want.end(), static_cast<size_t>(n), on);
  EXPECT_EQ(mask, want);
}

// The switches are part of the recipe a checkpoint keeps: load_model restores them (so a resumed
// AdamW run decays what the saved one did: the next step equals the uninterrupted run's bit for
// bit), load() into a model without switches adopts them, a model with its own keeps those, and a
// malformed or unknown entry is a CheckpointError naming it.
TEST(Regularization, CheckpointsKeepTheWeightDecaySwitches) {
  const std::string dir = test::temp_dir("decay_switches");
  const auto make = [] {
    auto m = std::make_unique<Sequential>();
    m->add<Dense>(3);
    m->add<Dense>(2);
    m->build(Shape{4}, 1);
    return m;
  };
  const Tensor x = test::random_tensor(Shape{8, 4}, 2), y = test::random_tensor(Shape{8, 2}, 3);
  std::unique_ptr<Sequential> m = make();
  m->set_weight_decay("dense_1/bias", true);
  m->set_weight_decay("dense/kernel", false);
  m->compile(std::make_unique<AdamW>(AdamWOptions{.learning_rate = 1e-2f, .weight_decay = 0.5f}),
             std::make_unique<losses::MeanSquaredError>());
  m->train_step(x, y);
  m->save(dir + "/m.st");
  m->train_step(x, y);  // the uninterrupted run's next step

  std::unique_ptr<Model> loaded = load_model(dir + "/m.st");
  EXPECT_EQ(loaded->weight_decay_switches(), m->weight_decay_switches());
  EXPECT_EQ(loaded->decay_mask().to_vector(), m->decay_mask().to_vector());
  loaded->compile(std::make_unique<AdamW>(AdamWOptions{.learning_rate = 1e-2f, .weight_decay = 0.5f}),
                  std::make_unique<losses::MeanSquaredError>());
  loaded->train_step(x, y);
  EXPECT_EQ(loaded->params().to_vector(), m->params().to_vector());

  std::unique_ptr<Sequential> plain = make();
  plain->load(dir + "/m.st");
  EXPECT_EQ(plain->weight_decay_switches(), m->weight_decay_switches());
  std::unique_ptr<Sequential> own = make();
  own->set_weight_decay("dense_1/kernel", false);
  own->load(dir + "/m.st");
  EXPECT_EQ(own->weight_decay_switches(), (std::vector<std::pair<std::string, bool>>{{"dense_1/kernel", false}}));

  // A file whose switches name another model's parameter, or hold something else, is refused.
  SafeTensors st = read_safetensors(dir + "/m.st");
  for (const std::string bad : {R"([["dense_9/bias", true]])", R"([["dense/bias", 1]])", R"({"dense/bias": true})"}) {
    st.metadata["weight_decay_switches"] = bad;
    write_safetensors(dir + "/bad.st", st);
    std::unique_ptr<Sequential> fresh = make();
    EXPECT_THROW(fresh->load(dir + "/bad.st"), CheckpointError) << bad;
    EXPECT_TRUE(fresh->weight_decay_switches().empty()) << bad;
  }
  std::filesystem::remove_all(dir);
}

// Two replicas clip and decay the all-reduced gradient, as one model does: under the Exact policy
// (every batch summed in one tree) the parameters are equal bit for bit after 10 steps.
TEST(Regularization, MirroredClipsTheReducedGradientLikeOneModel) {
  const Tensor x = test::random_tensor(Shape{640, 5}, 11);
  Tensor y = Tensor::empty(Shape{640, 1}, DType::F32, Device::cpu());
  for (int64_t i = 0; i < 640; ++i) y.f32()[i] = std::sin(3 * x.f32()[5 * i]) + x.f32()[5 * i + 1];
  const Dataset d = Dataset::from_tensors(x, y);
  const auto train = [&](std::unique_ptr<Strategy> s, float clipnorm) {
    ModelRecipe r;
    r.add_layers = [](Sequential& m) {
      m.add<Dense>(16, Activation::ReLU);
      m.add<Dense>(1);
    };
    r.input_shape = Shape{5};
    r.seed = 4;
    r.make_optimizer = [clipnorm] {
      return std::make_unique<AdamW>(AdamWOptions{.learning_rate = 1e-2f, .global_clipnorm = clipnorm});
    };
    r.make_loss = [] { return std::make_unique<losses::MeanSquaredError>(); };
    s->build(r);
    FitOptions o;
    o.batch_size = 64;
    o.max_steps = 10;
    o.seed = 9;
    o.verbose = 0;
    s->fit(d, o);
    return s->model().params().to_vector();
  };
  const test::ConvAlgorithmsScope exact(ConvAlgorithms::Exact);
  const std::vector<float> single = train(make_default_strategy(), 0.05f);
  const std::vector<float> mirrored = train(make_mirrored_cpu_strategy(2), 0.05f);
  const std::vector<float> unclipped = train(make_default_strategy(), 0.0f);
  EXPECT_EQ(mirrored, single);
  EXPECT_NE(unclipped, single) << "the clip must have been active for this test to mean anything";
}

}  // namespace
}  // namespace ember
