// Freezing (Layer::set_trainable): a frozen layer's parameters and statistics keep their bits
// through training under Adam with weight decay, its gradients read zero, the layers that train
// get the gradients they get unfrozen, a backward below which nothing trains does not run, a
// frozen BatchNormalization runs in inference mode, and summary and checkpoints keep the flags.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "test_util.h"

namespace ember {
namespace {

// y = s x with one parameter s; counts its backward calls.
class CountingScale final : public Layer {
 public:
  std::string type() const override { return "CountingScale"; }
  Shape build(const Shape& s) override { return s; }
  std::vector<ParamSpec> param_specs() const override {
    return {ParamSpec{.name = "scale", .shape = Shape{1}, .init = ParamSpec::Init::Ones}};
  }
  int backwards = 0;

 protected:
  const Tensor& do_forward(const Tensor& x, bool) override {
    x_ = x;
    y_ = Tensor::empty(x.shape(), DType::F32, Device::cpu());
    for (int64_t i = 0; i < x.numel(); ++i) y_.f32()[i] = params_[0].f32()[0] * x.f32()[i];
    return y_;
  }
  const Tensor& do_backward(const Tensor& dy) override {
    ++backwards;
    float ds = 0.0f;
    for (int64_t i = 0; i < dy.numel(); ++i) ds += dy.f32()[i] * x_.f32()[i];
    grads_[0].f32()[0] = ds;
    if (!needs_input_grad()) return no_input_grad();
    dx_ = Tensor::empty(dy.shape(), DType::F32, Device::cpu());
    for (int64_t i = 0; i < dy.numel(); ++i) dx_.f32()[i] = params_[0].f32()[0] * dy.f32()[i];
    return dx_;
  }

 private:
  Tensor x_, y_, dx_;
};

// conv -> BN -> pool -> conv -> flatten | dense -> dense: a base of five layers and a head of two.
Sequential base_and_head(bool with_bn) {
  Sequential m;
  m.add(std::make_shared<Conv2D>(8, Size2{3, 3}, Activation::ReLU));
  if (with_bn)
    m.add(std::make_shared<BatchNormalization>());
  else
    m.add(std::make_shared<ReLU>());
  m.add(std::make_shared<MaxPool2D>(Size2{2, 2}));
  m.add(std::make_shared<Conv2D>(8, Size2{3, 3}, Activation::ReLU));
  m.add(std::make_shared<Flatten>());
  m.add(std::make_shared<Dense>(16, Activation::ReLU));
  m.add(std::make_shared<Dense>(4));
  m.build(Shape{1, 12, 12}, 5);
  return m;
}
constexpr size_t kBase = 5;  // layers [0, kBase) are the base

std::vector<float> values_of(const std::vector<Tensor>& ts) {
  std::vector<float> v;
  for (const Tensor& t : ts) {
    const std::vector<float> a = t.to_vector();
    v.insert(v.end(), a.begin(), a.end());
  }
  return v;
}

// After three steps unfrozen (Adam's moments are not zero), five steps with the base frozen under
// AdamW leave the base's parameters and BatchNormalization's statistics bit for bit as they were;
// the head trains, and the base's gradients read zero.
TEST(Freezing, FrozenLayersKeepTheirBits) {
  const Tensor x = test::random_tensor(Shape{32, 1, 12, 12}, 1, 0.0f, 1.0f), y = test::cycling_labels(32, 4);
  Sequential m = base_and_head(true);
  m.compile(std::make_unique<AdamW>(AdamWOptions{.learning_rate = 1e-2f, .weight_decay = 0.1f}));
  for (int s = 0; s < 3; ++s) m.train_step(x, y);
  std::vector<std::vector<float>> before;
  for (size_t i = 0; i < kBase; ++i) {
    m.layers()[i]->set_trainable(false);
    before.push_back(values_of(m.layers()[i]->params()));
    before.back().push_back(0.0f);  // a separator, then the state
    const std::vector<float> st = values_of(m.layers()[i]->state());
    before.back().insert(before.back().end(), st.begin(), st.end());
  }
  const std::vector<float> head_before = values_of(m.layers()[kBase]->params());
  for (int s = 0; s < 5; ++s) m.train_step(x, y);
  for (size_t i = 0; i < kBase; ++i) {
    std::vector<float> now = values_of(m.layers()[i]->params());
    now.push_back(0.0f);
    const std::vector<float> st = values_of(m.layers()[i]->state());
    now.insert(now.end(), st.begin(), st.end());
    EXPECT_EQ(now, before[i]) << m.layers()[i]->name();
    for (const float g : values_of(m.layers()[i]->grads())) ASSERT_EQ(g, 0.0f) << m.layers()[i]->name();
  }
  EXPECT_NE(values_of(m.layers()[kBase]->params()), head_before);
}

// The layers that train get the gradients they get when nothing is frozen, bit for bit: a frozen
// middle layer still hands its input gradient down (to the first convolution), without computing
// its own.
TEST(Freezing, TrainingLayersGetTheUnfrozenGradients) {
  const Tensor x = test::random_tensor(Shape{32, 1, 12, 12}, 2, 0.0f, 1.0f), y = test::cycling_labels(32, 4);
  Sequential all = base_and_head(false), middle = base_and_head(false), base = base_and_head(false);
  middle.layers()[3]->set_trainable(false);  // the second convolution
  for (size_t i = 0; i < kBase; ++i) base.layers()[i]->set_trainable(false);
  for (Sequential* m : {&all, &middle, &base}) m->compute_gradients(x, y);
  for (size_t i = 0; i < all.layers().size(); ++i) {
    const std::vector<float> want = values_of(all.layers()[i]->grads());
    if (i == 3) {
      EXPECT_EQ(values_of(middle.layers()[i]->grads()), std::vector<float>(want.size(), 0.0f));
    } else {
      EXPECT_EQ(values_of(middle.layers()[i]->grads()), want) << i;
    }
    if (i >= kBase) {
      EXPECT_EQ(values_of(base.layers()[i]->grads()), want) << i;
    }
  }
  EXPECT_FALSE(base.layers()[kBase]->needs_input_grad());  // nothing below the head trains
  EXPECT_TRUE(middle.layers()[3]->needs_input_grad());     // the first convolution trains
}

// A backward below which nothing trains does not run; one that an earlier layer needs runs for
// its input gradient, its own gradient zero.
TEST(Freezing, BackwardRunsOnlyWhereSomethingBelowTrains) {
  const Tensor x = test::random_tensor(Shape{8, 6}, 3), y = test::cycling_labels(8, 3);
  for (const bool first_trains : {false, true}) {
    Sequential m;
    m.add(std::make_shared<Dense>(5));
    auto scale = std::make_shared<CountingScale>();
    m.add(scale);
    m.add(std::make_shared<Dense>(3));
    m.build(Shape{6}, 1);
    m.layers()[0]->set_trainable(first_trains);
    scale->set_trainable(false);
    m.compute_gradients(x, y);
    EXPECT_EQ(scale->backwards, first_trains ? 1 : 0);
    EXPECT_EQ(scale->grads()[0].to_vector(), std::vector<float>{0.0f});
    if (first_trains) {
      EXPECT_TRUE(scale->needs_input_grad());
      bool nonzero = false;
      for (const float g : m.layers()[0]->grads()[0].to_vector()) nonzero = nonzero || g != 0.0f;
      EXPECT_TRUE(nonzero);
    }
  }
  // Everything frozen: the step runs, every gradient is zero, the parameters stay.
  Sequential m;
  m.add(std::make_shared<Dense>(3));
  m.build(Shape{6}, 1);
  m.set_trainable(false);
  m.compile(std::make_unique<Adam>());
  const std::vector<float> p = m.params().to_vector();
  m.train_step(x, y);
  EXPECT_EQ(m.params().to_vector(), p);
  for (const float g : m.grads().to_vector()) ASSERT_EQ(g, 0.0f);
}

// An input gradient asked for after a backward pass (set_needs_input_grad(true) on a first
// convolution that runs fused with its pool): the switch stands, and the next pass computes it.
TEST(Freezing, AnInputGradientAskedForLaterIsComputed) {
  const Tensor x = test::random_tensor(Shape{8, 1, 12, 12}, 5, 0.0f, 1.0f), y = test::cycling_labels(8, 4);
  const auto model = [](Sequential& m) {
    m.add(std::make_shared<Conv2D>(4, Size2{3, 3}, Activation::ReLU));
    m.add(std::make_shared<MaxPool2D>(Size2{2, 2}));
    m.add(std::make_shared<Flatten>());
    m.add(std::make_shared<Dense>(4));
    m.build(Shape{1, 12, 12}, 1);
  };
  Sequential m;
  model(m);
  ASSERT_TRUE(m.fused_with_next(0));
  m.compute_gradients(x, y);
  EXPECT_FALSE(m.input_gradient(0).defined());
  m.layers()[0]->set_needs_input_grad(true);
  EXPECT_TRUE(m.layers()[0]->needs_input_grad());
  m.compute_gradients(x, y);
  ASSERT_TRUE(m.input_gradient(0).defined());
  EXPECT_EQ(m.input_gradient(0).shape(), x.shape());
  // The input gradient itself: as the pair gives it unfused, up to the order of its sums (the
  // fused pair's bound in test_conv_pool_fusion.cpp), and not all zeros.
  Sequential plain;
  model(plain);
  plain.set_cpu_fusion(false);
  plain.layers()[0]->set_needs_input_grad(true);
  plain.compute_gradients(x, y);
  const std::vector<float> got = m.input_gradient(0).to_vector(), want = plain.input_gradient(0).to_vector();
  EXPECT_LT(test::scaled_error(got, want), 1e-5);
  EXPECT_GT(*std::max_element(want.begin(), want.end()), 0.0f);
}

// A frozen BatchNormalization normalises with its moving statistics in training too, and its
// backward is the inference mode's: dx = gamma dy / sqrt(var + eps).
TEST(Freezing, FrozenBatchNormRunsInInferenceMode) {
  BatchNormalization bn;
  test::build_standalone(bn, Shape{3, 4, 4}, 7);
  Tensor(bn.state()[0]).copy_from(test::random_tensor(Shape{3}, 8));
  Tensor(bn.state()[1]).copy_from(test::random_tensor(Shape{3}, 9, 0.5f, 2.0f));
  bn.set_trainable(false);
  const Tensor x = test::random_tensor(Shape{4, 3, 4, 4}, 10), dy = test::random_tensor(Shape{4, 3, 4, 4}, 11);
  const std::vector<float> inference = bn.forward(x, false).to_vector();
  const std::vector<float> stats = values_of(bn.state());
  EXPECT_EQ(bn.forward(x, true).to_vector(), inference);
  EXPECT_EQ(values_of(bn.state()), stats);  // the moving statistics stay
  const Tensor dx = bn.backward(dy).to_layout(Layout::RowMajor);
  const std::vector<float> gamma = bn.params()[0].to_vector(), var = bn.state()[1].to_vector();
  // The kernel forms gamma / sqrt(var + eps) in its own order: a few roundings of float (the sum,
  // the root, the quotient, the product; 2^-24 each) apart from the double formula.
  for (int64_t i = 0; i < dx.numel(); ++i) {
    const int64_t c = (i / 16) % 3;
    const double want = gamma[size_t(c)] / std::sqrt(double(var[size_t(c)]) + 1e-3) * dy.f32()[i];
    ASSERT_NEAR(dx.f32()[i], want, 4 * std::ldexp(std::fabs(want), -24) + 1e-30) << i;
  }
}

// summary() counts a frozen layer's parameters as non-trainable; a checkpoint keeps the flags
// (load_model restores them); a nested model's set_trainable freezes its layers in the outer one.
TEST(Freezing, SummaryAndCheckpointsKeepTheFlags) {
  Sequential base;
  base.add(std::make_shared<Dense>(5));  // 6*5+5 = 35
  base.add(std::make_shared<Dense>(4));  // 5*4+4 = 24
  SymbolicTensor in = Input(Shape{6});
  SymbolicTensor out = layer<Dense>(3)(base(in));  // 4*3+3 = 15
  Model m(in, out);
  m.build(1);
  base.set_trainable(false);
  const std::string s = m.summary();
  EXPECT_NE(s.find("Total params: 74"), std::string::npos) << s;
  EXPECT_NE(s.find("Trainable params: 15"), std::string::npos) << s;
  EXPECT_NE(s.find("Non-trainable params: 59"), std::string::npos) << s;
  const std::string path = ::testing::TempDir() + "frozen.safetensors";
  m.save(path);
  const auto loaded = load_model(path);
  std::remove(path.c_str());
  ASSERT_EQ(loaded->layers().size(), 3u);
  EXPECT_FALSE(loaded->layers()[0]->trainable());
  EXPECT_FALSE(loaded->layers()[1]->trainable());
  EXPECT_TRUE(loaded->layers()[2]->trainable());
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// A small trained base saved to a file: conv -> relu -> pool -> conv -> flatten -> dense -> dense_1.
std::string saved_base(const Tensor& x, const Tensor& y) {
  Sequential m = base_and_head(false);
  m.compile(std::make_unique<Adam>());
  for (int s = 0; s < 3; ++s) m.train_step(x, y);
  const std::string path = ::testing::TempDir() + "base.safetensors";
  m.save(path);
  return path;
}

// Keras' Model(base.input, head(base.get_layer(...).output)) from a model load_model returned: the
// new model starts from the file's values bit for bit (a loaded model called as a layer predicts as
// it did), trains its head with the base frozen, and the old model gives its layers up.
TEST(FineTuning, ALoadedModelsLayersJoinANewModel) {
  const Tensor x = test::random_tensor(Shape{32, 1, 12, 12}, 4, 0.0f, 1.0f), y = test::cycling_labels(32, 4);
  const std::string path = saved_base(x, y);
  {  // called as a layer: the same predictions
    auto base = load_model(path);
    const std::vector<float> want = base->predict(x).to_vector();
    SymbolicTensor in = Input(Shape{1, 12, 12});
    Model same(in, (*base)(in));
    same.build(9);  // the seed initialises nothing: every layer is adopted
    EXPECT_EQ(same.predict(x).to_vector(), want);
    EXPECT_THROW(base->predict(x), Error);  // its layers are same's now
    EXPECT_THROW((*base)(in), Error);
  }
  auto base = load_model(path);
  const std::vector<float> conv = base->get_layer("conv2d").params()[0].to_vector();
  base->set_trainable(false);
  SymbolicTensor features = base->layer_output("dense"), base_in = base->input();
  Model tuned(base_in, layer<Dense>(3)(features));
  tuned.build(2);
  EXPECT_EQ(tuned.layers().size(), 7u);  // the base up to "dense", and the new head
  EXPECT_EQ(tuned.get_layer("conv2d").params()[0].to_vector(), conv);
  tuned.compile(std::make_unique<Adam>());
  const Tensor y3 = test::cycling_labels(32, 3);
  const float first = tuned.train_step(x, y3);
  float last = first;
  for (int s = 0; s < 20; ++s) last = tuned.train_step(x, y3);
  EXPECT_LT(last, first);
  EXPECT_EQ(tuned.get_layer("conv2d").params()[0].to_vector(), conv);  // frozen: bit for bit
  EXPECT_FALSE(tuned.layers()[0]->needs_input_grad());
  {  // a second model on the same base graph: refused (the layers are tuned's)
    Model again(base_in, layer<Dense>(2)(features));
    EXPECT_THROW(again.build(3), ArgumentError);
  }
  {  // a trainable layer in front of an adopted base whose first layer has no parameters: that
     // layer now hands its input gradient on (the old model's plan had turned it off)
    Sequential small;
    small.add(std::make_shared<Rescaling>(0.5f));
    small.add(std::make_shared<Conv2D>(2, Size2{3, 3}, Activation::ReLU));
    small.add(std::make_shared<Flatten>());
    small.add(std::make_shared<Dense>(4));
    small.build(Shape{1, 12, 12}, 6);
    small.compute_gradients(x, y);  // a pass under the old plan
    SymbolicTensor in = Input(Shape{1, 12, 12});
    auto front = layer<Conv2D>(1, Size2{1, 1}, Activation::None, Padding::Same);
    Model fronted(in, small(front(in)));
    fronted.build(5);
    fronted.compute_gradients(x, y);
    bool moved = false;
    for (const float g : front->grads()[0].to_vector()) moved = moved || g != 0.0f;
    EXPECT_TRUE(moved);
  }
  std::remove(path.c_str());
  EXPECT_THROW(tuned.get_layer("no_such_layer"), ArgumentError);
  EXPECT_THROW(base->layer_output("dense"), Error);  // gave its layers to tuned
}

}  // namespace
}  // namespace ember
