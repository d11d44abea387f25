// The augmentation layers: each training output is one of the moves the layer may make of its
// input (a flip, a whole-pixel shift with zeros shifted in, a window of the zero-padded image),
// the draws cover that range, inference is the identity or the central window, the backward is the
// forward's adjoint, a step counter in the model's state makes the draws reproducible, and
// Rescaling is x * scale + offset.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "test_util.h"

namespace ember {
namespace {

constexpr int64_t kN = 64, kC = 2, kH = 6, kW = 7;

// Sample b of x (N, C, H, W) read through (flip, shift): the pixel (i, j) of the output is input
// pixel (fi - dy, fj - dx) of a window (oh, ow) of the image padded by (py, px), zero outside.
std::vector<float> moved(const Tensor& x, int64_t b, int64_t oh, int64_t ow, int64_t oy, int64_t ox, int64_t py,
                         int64_t px, bool fv, bool fh) {
  std::vector<float> out;
  for (int64_t c = 0; c < kC; ++c)
    for (int64_t i = 0; i < oh; ++i)
      for (int64_t j = 0; j < ow; ++j) {
        const int64_t r = (fv ? oh - 1 - i : i) + oy - py, q = (fh ? ow - 1 - j : j) + ox - px;
        out.push_back(r >= 0 && r < kH && q >= 0 && q < kW ? x.f32()[((b * kC + c) * kH + r) * kW + q] : 0.0f);
      }
  return out;
}

std::vector<float> sample_of(const Tensor& y, int64_t b) {
  const int64_t per = y.numel() / y.dim(0);
  return {y.f32() + b * per, y.f32() + (b + 1) * per};
}

// The move of each sample among every one the layer may make: (oy, ox, fv, fh) found, -1 if none.
struct Found {
  int64_t oy = -1, ox = -1;
  bool fv = false, fh = false;
};
Found find_move(const Tensor& x, const Tensor& y, int64_t b, int64_t oh, int64_t ow, int64_t max_oy, int64_t max_ox,
                int64_t py, int64_t px, bool may_fv, bool may_fh) {
  for (int64_t oy = 0; oy <= max_oy; ++oy)
    for (int64_t ox = 0; ox <= max_ox; ++ox)
      for (const bool fv : {false, true})
        for (const bool fh : {false, true}) {
          if ((fv && !may_fv) || (fh && !may_fh)) continue;
          if (moved(x, b, oh, ow, oy, ox, py, px, fv, fh) == sample_of(y, b)) return {oy, ox, fv, fh};
        }
  return {};
}

// <y, g> and <x, dx> in double: the same products (exact in double), summed in two orders, so within
// 2 n 2^-53 sum |terms| of each other.
void expect_adjoint(Layer& l, const Tensor& x, const Tensor& y) {
  const Tensor g = test::random_tensor(y.shape(), 99);
  const Tensor dx = l.backward(g).to_layout(Layout::RowMajor);
  double a = 0, b = 0, mag = 0;
  for (int64_t i = 0; i < y.numel(); ++i) {
    a += double(y.f32()[i]) * g.f32()[i];
    mag += std::fabs(double(y.f32()[i]) * g.f32()[i]);
  }
  for (int64_t i = 0; i < x.numel(); ++i) b += double(x.f32()[i]) * dx.f32()[i];
  EXPECT_NEAR(a, b, 2.0 * double(y.numel() + x.numel()) * std::ldexp(1.0, -53) * mag + 1e-300);
}

TEST(Augmentation, RandomFlipDrawsEveryFlipAndPassesThroughInInference) {
  RandomFlip flip;  // horizontal_and_vertical
  test::build_standalone(flip, Shape{kC, kH, kW}, 3);
  const Tensor x = test::random_tensor(Shape{kN, kC, kH, kW}, 1);
  const Tensor y = flip.forward(x, true);
  std::set<std::pair<bool, bool>> seen;
  for (int64_t b = 0; b < kN; ++b) {
    const Found f = find_move(x, y, b, kH, kW, 0, 0, 0, 0, true, true);
    ASSERT_EQ(f.oy, 0) << "sample " << b << " is no flip of its input";
    seen.insert({f.fv, f.fh});
  }
  EXPECT_EQ(seen.size(), 4u);  // each of the four has probability 1/4 per sample: all in 64
  expect_adjoint(flip, x, y);
  EXPECT_EQ(flip.forward(x, false).f32(), x.f32());  // inference: the input itself
  RandomFlip horizontal("horizontal");
  test::build_standalone(horizontal, Shape{kC, kH, kW}, 3);
  RandomFlip vertical("vertical");
  test::build_standalone(vertical, Shape{kC, kH, kW}, 3);
  for (const bool across : {true, false}) {  // each sample flips with probability 1/2: both kinds among 64
    const Tensor yo = (across ? horizontal : vertical).forward(x, true);
    std::set<bool> flipped;
    for (int64_t b = 0; b < kN; ++b) {
      const Found f = find_move(x, yo, b, kH, kW, 0, 0, 0, 0, !across, across);
      ASSERT_EQ(f.oy, 0) << "sample " << b << " is no " << (across ? "horizontal" : "vertical") << " flip";
      flipped.insert(across ? f.fh : f.fv);
    }
    EXPECT_EQ(flipped.size(), 2u) << (across ? "horizontal" : "vertical");
  }
  EXPECT_THROW(RandomFlip("diagonal"), ArgumentError);
}

TEST(Augmentation, RandomTranslationShiftsByWholePixelsWithinItsRange) {
  RandomTranslation t(0.34f, 0.3f);  // round(0.34 * 6) = 2 rows, round(0.3 * 7) = 2 columns
  test::build_standalone(t, Shape{kC, kH, kW}, 4);
  const Tensor x = test::random_tensor(Shape{kN, kC, kH, kW}, 2, 0.5f, 1.0f);  // no zero inside the image
  const Tensor y = t.forward(x, true);
  std::set<int64_t> dys, dxs;
  for (int64_t b = 0; b < kN; ++b) {
    const Found f = find_move(x, y, b, kH, kW, 4, 4, 2, 2, false, false);
    ASSERT_GE(f.oy, 0) << "sample " << b << " is no shift of its input within 2 pixels";
    dys.insert(f.oy - 2);
    dxs.insert(f.ox - 2);
  }
  EXPECT_EQ(dys.size(), 5u);  // -2..2, each 1/5 per sample
  EXPECT_EQ(dxs.size(), 5u);
  expect_adjoint(t, x, y);
  EXPECT_EQ(t.forward(x, false).f32(), x.f32());
}

TEST(Augmentation, RandomCropTakesAWindowOfThePaddedImageAndTheMiddleInInference) {
  RandomCrop crop(5, 7, 1);  // a 5x7 window of the 8x9 padded image
  EXPECT_EQ(test::build_standalone(crop, Shape{kC, kH, kW}, 5), (Shape{kC, 5, 7}));
  const Tensor x = test::random_tensor(Shape{kN, kC, kH, kW}, 3, 0.5f, 1.0f);
  const Tensor y = crop.forward(x, true);
  std::set<std::pair<int64_t, int64_t>> offsets;
  for (int64_t b = 0; b < kN; ++b) {
    const Found f = find_move(x, y, b, 5, 7, 3, 2, 1, 1, false, false);
    ASSERT_GE(f.oy, 0) << "sample " << b;
    offsets.insert({f.oy, f.ox});
  }
  EXPECT_GE(offsets.size(), 8u);  // 12 windows; missing 5 of them in 64 draws has probability < 1e-6
  expect_adjoint(crop, x, y);
  const Tensor mid = crop.forward(x, false);
  for (int64_t b = 0; b < kN; ++b) ASSERT_EQ(sample_of(mid, b), moved(x, b, 5, 7, 1, 1, 1, 1, false, false));
  RandomCrop big(9, 9, 1);
  EXPECT_THROW(test::build_standalone(big, Shape{kC, kH, kW}, 5), ShapeError);
}

// The draws follow the model's seed and the step counter: the same seed and step give the same
// output, the next step another; the counter is state a checkpoint keeps.
TEST(Augmentation, DrawsFollowTheSeedAndTheStepCounter) {
  const Tensor x = test::random_tensor(Shape{kN, kC, kH, kW}, 4);
  const auto run = [&](uint64_t seed, int steps) {
    RandomTranslation t(0.3f, 0.3f);
    test::build_standalone(t, Shape{kC, kH, kW}, seed);
    std::vector<float> y;
    for (int s = 0; s < steps; ++s) y = t.forward(x, true).to_vector();
    EXPECT_EQ(t.state()[0].to_vector(), (std::vector<float>{float(steps), 0.0f}));
    return y;
  };
  EXPECT_EQ(run(1, 1), run(1, 1));
  EXPECT_NE(run(1, 1), run(1, 2));
  EXPECT_NE(run(1, 1), run(2, 1));
}

TEST(Augmentation, RescalingIsScaleAndOffset) {
  Rescaling r(1.0f / 255.0f, -0.5f);
  test::build_standalone(r, Shape{3, 4}, 1);
  const Tensor x = test::random_tensor(Shape{5, 3, 4}, 5, 0.0f, 255.0f), g = test::random_tensor(Shape{5, 3, 4}, 6);
  const std::vector<float> y = r.forward(x, false).to_vector(), y_train = r.forward(x, true).to_vector();
  const std::vector<float> dx = r.backward(g).to_vector();
  for (int64_t i = 0; i < x.numel(); ++i) {
    ASSERT_EQ(y[size_t(i)], std::fma(x.f32()[i], 1.0f / 255.0f, -0.5f));  // one rounding
    ASSERT_EQ(y_train[size_t(i)], y[size_t(i)]);
    ASSERT_EQ(dx[size_t(i)], g.f32()[i] * (1.0f / 255.0f));
  }
  EXPECT_THROW(Rescaling(std::nanf("")), ArgumentError);
}

// In a model: fit trains through them, evaluate sees the central window, load_model recreates them.
TEST(Augmentation, AModelTrainsEvaluatesAndReloadsWithThem) {
  Sequential m;
  m.add(std::make_shared<RandomCrop>(8, 8, 2));
  m.add(std::make_shared<RandomFlip>("horizontal"));
  m.add(std::make_shared<Rescaling>(2.0f));
  m.add(std::make_shared<Conv2D>(4, Size2{3, 3}, Activation::ReLU));
  m.add(std::make_shared<Flatten>());
  m.add(std::make_shared<Dense>(2));
  const Dataset data = test::corner_dataset(256, 1);
  m.compile(std::make_unique<Adam>(AdamOptions{.learning_rate = 1e-2f}));
  FitOptions o;
  o.epochs = 3;
  o.batch_size = 32;
  o.verbose = 0;
  const History h = m.fit(data, o);
  EXPECT_LT(h.epochs.back().loss, h.epochs.front().loss);
  const std::string path = ::testing::TempDir() + "augmented.safetensors";
  m.save(path);
  const auto loaded = load_model(path);
  std::remove(path.c_str());
  const EvalResult a = m.evaluate(data), b = loaded->evaluate(data);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_GT(a.accuracy, 0.9);  // corners: chance 0.5
  EXPECT_EQ(loaded->layers()[0]->type(), "RandomCrop");
}

// One RandomCrop called twice (a shared layer: one step counter, advanced by each call) between
// trainable convolutions: each call's backward moves its gradient back under its own forward's draw.
// With the counter set back before every forward the draws are fixed, and finite differences of
// the loss confirm the convolutions' gradients.
TEST(Augmentation, ASharedLayersCallsEachUndoTheirOwnDraw) {
  SymbolicTensor x = Input(Shape{1, 5, 5});
  auto crop = layer<RandomCrop>(4, 4, 1);
  SymbolicTensor a = crop(layer<Conv2D>(2, Size2{1, 1}, Activation::Tanh)(x));
  SymbolicTensor b = crop(layer<Conv2D>(2, Size2{1, 1}, Activation::Tanh)(x));
  Model m(x, layer<Dense>(2)(layer<Flatten>()(add({a, b}))));
  m.build(4);
  const Tensor in = test::random_tensor(Shape{6, 1, 5, 5}, 7);
  Tensor labels = Tensor::empty(Shape{6}, DType::I32);
  for (int64_t i = 0; i < 6; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>(i % 2);
  const std::vector<float> state0 = m.state().to_vector();
  const auto restore = [&] { m.state().copy_from(Tensor::from_vector(Shape{int64_t(state0.size())}, state0)); };
  restore();
  m.compute_gradients(in, labels);
  EXPECT_EQ(m.state().to_vector()[0], state0[0] + 2.0f);  // two calls, two draws
  const std::vector<float> analytic = m.grads().to_vector();
  losses::SparseCategoricalCrossentropy ce;
  test::GradCheckOptions go;
  go.step = 1e-3;
  const test::GradCheckResult r = test::check_gradient(
      [&] {
        restore();
        return double(ce.value(m.forward(in, true), labels));
      },
      std::span<float>(m.params().f32(), static_cast<size_t>(m.params().numel())), analytic, "shared crop", go);
  EXPECT_GT(r.checked, m.num_params() / 2);
}

// FitOptions::transform: called on every training batch with its (epoch, index), before the step;
// doubling the images there trains as a Rescaling(2) layer does, bit for bit; a resumed fit calls
// it with the same (epoch, index) pairs; evaluation batches do not pass through it.
TEST(Augmentation, AFitHookTransformsTrainingBatches) {
  const Dataset data = test::corner_dataset(96, 2);
  const auto model = [](bool rescale) {
    auto m = std::make_unique<Sequential>();
    if (rescale) m->add(std::make_shared<Rescaling>(2.0f));
    m->add(std::make_shared<Conv2D>(4, Size2{3, 3}, Activation::ReLU));
    m->add(std::make_shared<Flatten>());
    m->add(std::make_shared<Dense>(2));
    m->build(Shape{1, 8, 8}, 3);
    m->compile(std::make_unique<Adam>());
    return m;
  };
  FitOptions o;
  o.epochs = 2;
  o.batch_size = 32;
  o.verbose = 0;
  std::vector<std::pair<int, int64_t>> calls;
  FitOptions hooked = o;
  hooked.transform = [&](Batch& b, int epoch, int64_t index) {
    calls.push_back({epoch, index});
    Tensor doubled = Tensor::empty(b.x().shape(), DType::F32, b.x().device());
    for (int64_t i = 0; i < doubled.numel(); ++i) doubled.f32()[i] = b.x().f32()[i] * 2.0f;
    b.x() = doubled;
  };
  auto with_hook = model(false), with_layer = model(true);
  const History h = with_hook->fit(data, hooked, &data);
  with_layer->fit(data, o, &data);
  EXPECT_EQ(with_hook->params().to_vector(), with_layer->params().to_vector());
  EXPECT_EQ(calls, (std::vector<std::pair<int, int64_t>>{{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}}));
  // Validation saw the data as it is: the model's own evaluate of the untransformed data.
  // (The same float sums; the history's mean is formed in another double order: a few ulps of a double.)
  const double val = *h.epochs.back().val_loss;
  EXPECT_NEAR(val, with_hook->evaluate(data, 32).loss, 4 * std::ldexp(std::fabs(val), -52));
  calls.clear();
  hooked.initial_epoch = 1;
  hooked.initial_batch = 1;
  model(false)->fit(data, hooked);
  EXPECT_EQ(calls, (std::vector<std::pair<int, int64_t>>{{1, 1}, {1, 2}}));
  // A hook that changes the batch's form is named, not blamed on the labels a layer later finds.
  FitOptions cut = o;
  cut.transform = [](Batch& b, int, int64_t) { b.x() = b.x().rows(0, 3); };
  try {
    model(false)->fit(data, cut);
    ADD_FAILURE() << "a 3-row input for a 32-row batch trained";
  } catch (const ArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("FitOptions::transform changed the batch's input 0"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ember
