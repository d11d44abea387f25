// Dropout: inverted scaling in training only, the drop fraction, reproducible masks (seed,
// step, layout), gradients, the step counter in the model's state and a bit-exact resume.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "test_util.h"

namespace ember {
namespace {

TEST(Dropout, RejectsRatesOutsideZeroToOne) {
  EXPECT_THROW(Dropout(-0.1f), ArgumentError);
  EXPECT_THROW(Dropout(1.0f), ArgumentError);
  EXPECT_THROW(Dropout(std::nanf("")), ArgumentError);
  EXPECT_NO_THROW(Dropout(0.0f));
}

TEST(Dropout, PassesTheInputThroughInInference) {
  Dropout layer(0.5f);
  test::build_standalone(layer, Shape{3, 4, 4}, 1);
  const Tensor x = test::random_tensor(Shape{2, 3, 4, 4}, 2);
  EXPECT_EQ(layer.forward(x, false).to_vector(), x.to_vector());
  EXPECT_EQ(layer.backward(x).to_vector(), x.to_vector());  // the gradient of the identity
}

TEST(Dropout, DropsTheRateAndScalesTheRest) {
  const float rate = 0.3f;
  Dropout layer(rate);
  test::build_standalone(layer, Shape{100000}, 1);
  const Tensor x = test::random_tensor(Shape{1, 100000}, 2, 0.5f, 1.5f);  // never 0: a 0 output means dropped
  const std::vector<float> y = layer.forward(x, true).to_vector();
  const std::vector<float> in = x.to_vector();
  int64_t dropped = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (y[i] == 0.0f) {
      ++dropped;
      continue;
    }
    EXPECT_EQ(y[i], in[i] * (1.0f / (1.0f - rate))) << i;  // kept: scaled exactly
  }
  // Binomial(1e5, 0.3): standard deviation 145 drops; 1,000 is ~7 of them.
  EXPECT_NEAR(static_cast<double>(dropped), 0.3 * 1e5, 1000.0);
}

std::vector<float> draw(uint64_t seed, int steps, const Tensor& x) {
  Dropout layer(0.5f);
  test::build_standalone(layer, x.shape().without_batch(), seed);
  std::vector<float> y;
  for (int i = 0; i < steps; ++i) y = layer.forward(x, true).to_vector();
  return y;
}

TEST(Dropout, MasksDependOnSeedAndStepOnly) {
  const Tensor x = test::random_tensor(Shape{4, 3, 5, 5}, 2, 0.5f, 1.5f);
  EXPECT_EQ(draw(7, 1, x), draw(7, 1, x));  // same seed, same step: same bits
  EXPECT_NE(draw(7, 1, x), draw(8, 1, x));  // another seed
  EXPECT_NE(draw(7, 1, x), draw(7, 2, x));  // the next step draws anew
  // The mask follows each element's logical (N, C, H, W) position, not the memory order.
  Dropout nhwc(0.5f);
  test::build_standalone(nhwc, Shape{3, 5, 5}, 7);
  const Tensor& y = nhwc.forward(x.to_layout(Layout::NHWC), true);
  EXPECT_EQ(y.layout(), Layout::NHWC);
  EXPECT_EQ(y.to_vector(), draw(7, 1, x));
}

TEST(Dropout, TheStepCounterIsExactPastTwoToTheTwentyFour) {
  Tensor c = Tensor::from_vector(Shape{2}, std::vector<float>{16777215.0f, 3.0f});
  EXPECT_EQ(detail::counter_value(c.f32()), 3ull * 16777216ull + 16777215ull);
  detail::counter_advance(c.f32());
  EXPECT_EQ(c.f32()[0], 0.0f);
  EXPECT_EQ(c.f32()[1], 4.0f);
  EXPECT_EQ(detail::counter_value(c.f32()), 4ull * 16777216ull);
}

TEST(Dropout, GradientIsTheMaskScaled) {
  Dropout layer(0.4f);
  test::build_standalone(layer, Shape{2, 3, 3}, 3);
  Tensor x = test::random_tensor(Shape{2, 2, 3, 3}, 4, 0.5f, 1.5f);
  const Tensor dy = test::random_tensor(x.shape(), 5);
  Tensor counter = layer.state()[0];
  const std::vector<float> y = layer.forward(x, true).to_vector();
  const std::vector<float> dx = layer.backward(dy).to_vector();
  const std::vector<float> g = dy.to_vector();
  for (size_t i = 0; i < y.size(); ++i) EXPECT_EQ(dx[i], y[i] == 0.0f ? 0.0f : g[i] * (1.0f / 0.6f)) << i;
  // And by finite differences, with the step (so the mask) held fixed for every evaluation.
  auto loss = [&] {
    counter.fill(0.0f);
    const std::vector<float> out = layer.forward(x, true).to_vector();
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += double(out[i]) * g[i];
    return s;
  };
  loss();
  const std::vector<float> analytic = layer.backward(dy).to_vector();
  test::check_gradient(loss, std::span<float>(x.f32(), static_cast<size_t>(x.numel())), analytic, "Dropout input");
}

Dataset pattern_dataset(int64_t n) {
  Tensor images = Tensor::zeros(Shape{n, 1, 4, 4}, DType::U8, Device::cpu());
  Tensor labels = Tensor::zeros(Shape{n}, DType::I32, Device::cpu());
  for (int64_t i = 0; i < n; ++i) {
    labels.data<int32_t>()[i] = static_cast<int32_t>(i % 3);
    for (int64_t j = 0; j < 16; ++j)
      images.data<uint8_t>()[i * 16 + j] = static_cast<uint8_t>((i * 31 + j * 17 + (i % 3) * 80) % 256);
  }
  return Dataset(images, labels, 3);
}

std::unique_ptr<Sequential> dropout_model(uint64_t seed = 5) {
  auto m = std::make_unique<Sequential>();
  m->add<Flatten>();
  m->add<Dense>(16, Activation::ReLU);
  m->add<Dropout>(0.5f);
  m->add<Dense>(3);
  m->build(Shape{1, 4, 4}, seed);
  m->compile(std::make_unique<Adam>(AdamOptions{.learning_rate = 1e-2f}));
  return m;
}

// Two epochs straight, or one, a checkpoint, a fresh model loading it and the second: the
// same bits (the step counter travels in the checkpoint).
TEST(Dropout, AResumedRunDrawsWhatTheUninterruptedOneDrew) {
  const Dataset data = pattern_dataset(40);
  FitOptions opt{.epochs = 2, .batch_size = 8, .seed = 3, .verbose = 0};
  auto straight = dropout_model();
  straight->fit(data, opt);

  const auto path = std::filesystem::temp_directory_path() / "ember_dropout_resume.safetensors";
  auto first = dropout_model();
  FitOptions one = opt;
  one.epochs = 1;
  first->fit(data, one);
  first->save(path.string(), TrainingState{.epochs_done = 1, .seed = 3, .batch_size = 8});
  EXPECT_EQ(first->named_state().size(), 1u);
  EXPECT_EQ(first->named_state()[0].first, "dropout/step");
  EXPECT_EQ(first->named_state()[0].second.to_vector(), (std::vector<float>{5.0f, 0.0f}));  // 40 / 8 steps

  // Built with another seed: the checkpoint's (random_seed) is what Dropout draws from.
  auto resumed = dropout_model(99);
  const TrainingState st = resumed->load(path.string());
  EXPECT_EQ(resumed->random_seed(), 5u);
  FitOptions rest = opt;
  rest.initial_epoch = st.epochs_done;
  resumed->fit(data, rest);
  EXPECT_EQ(resumed->params().to_vector(), straight->params().to_vector());
  EXPECT_EQ(resumed->state().to_vector(), straight->state().to_vector());

  // A step counter that is no step count is the file's fault, named; the model is unchanged.
  for (float bad : {0.5f, -1.0f, 16777216.0f, std::nanf("")}) {
    SafeTensors file = read_safetensors(path.string());
    for (auto& [name, t] : file.tensors)
      if (name == "dropout/step") t.f32()[0] = bad;
    const auto broken = std::filesystem::temp_directory_path() / "ember_dropout_broken.safetensors";
    write_safetensors(broken.string(), file);
    auto fresh = dropout_model();
    const std::vector<float> before = fresh->params().to_vector();
    EXPECT_THROW(fresh->load(broken.string()), CheckpointError) << bad;
    EXPECT_EQ(fresh->params().to_vector(), before);
    std::filesystem::remove(broken);
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace ember
