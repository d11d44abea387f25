// Sigmoid, Tanh, LeakyReLU, GELU, Softmax: forward against the formulas (GELU against PyTorch),
// gradients by finite differences, a final Softmax's loss read from the logits, bad arguments; the
// same functions as Conv2D's and Dense's `activation`.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>

#include "core/safetensors.h"
#include "idx_fixtures.h"
#include "test_util.h"

namespace ember {
namespace {

template <class L>
void expect_elementwise(L& layer, float (*f)(float)) {
  test::build_standalone(layer, Shape{3, 4, 5}, 1);
  const Tensor x = test::random_tensor(Shape{2, 3, 4, 5}, 7, -4.0f, 4.0f);
  const std::vector<float> y = layer.forward(x, false).to_vector();
  const std::vector<float> in = x.to_vector();
  for (size_t i = 0; i < in.size(); ++i) EXPECT_NEAR(y[i], f(in[i]), 1e-6f * std::max(1.0f, std::abs(f(in[i]))));
}

TEST(Activations, ForwardMatchesTheFormulas) {
  Sigmoid sigmoid;
  expect_elementwise(sigmoid, [](float v) { return static_cast<float>(1.0 / (1.0 + std::exp(-double(v)))); });
  Tanh tanh_layer;
  expect_elementwise(tanh_layer, [](float v) { return static_cast<float>(std::tanh(double(v))); });
  LeakyReLU leaky;  // Keras' default slope, 0.3
  expect_elementwise(leaky, [](float v) { return v > 0 ? v : 0.3f * v; });
  EXPECT_FLOAT_EQ(LeakyReLU().alpha(), 0.3f);
}

TEST(Activations, KeepTheInputLayout) {
  Tanh layer;
  test::build_standalone(layer, Shape{3, 4, 5}, 1);
  const Tensor x = test::random_tensor(Shape{2, 3, 4, 5}, 7);
  const Tensor nhwc = x.to_layout(Layout::NHWC);
  const Tensor& y = layer.forward(nhwc, false);
  EXPECT_EQ(y.layout(), Layout::NHWC);
  Tanh ref;
  test::build_standalone(ref, Shape{3, 4, 5}, 1);
  EXPECT_EQ(y.to_vector(), ref.forward(x, false).to_vector());  // elementwise: the same bits
}

TEST(Activations, GradientsMatchFiniteDifferences) {
  Sigmoid sigmoid;
  test::build_standalone(sigmoid, Shape{2, 3, 3}, 1);
  test::check_layer_gradients(sigmoid, test::random_tensor(Shape{2, 2, 3, 3}, 3, -3.0f, 3.0f), 5);
  Tanh tanh_layer;
  test::build_standalone(tanh_layer, Shape{7}, 1);
  test::check_layer_gradients(tanh_layer, test::random_tensor(Shape{3, 7}, 4, -2.0f, 2.0f), 5);
  LeakyReLU leaky(0.1f);
  test::build_standalone(leaky, Shape{2, 3, 3}, 1);
  test::check_layer_gradients(leaky, test::random_tensor(Shape{2, 2, 3, 3}, 6), 5);
}

// GELU and its tanh form against bench/pytorch_gelu_reference.py: PyTorch's functions and autograd
// gradients in float64, rounded to float32, on [-8, 8] and at 0, -0, +-1e-4, +-20, +-1e4, +-1e20.
// Tolerances, from the float32 arithmetic (u = 2^-23, one ulp of 1):
//  - y = x (1 + erf(x / sqrt 2)) / 2: erff is within 1 ulp of its value (<= 1) in glibc, the sum
//    with 1 and the two products round to half an ulp each, so |dy| <= 4u max(1, |x|) (the tanh
//    form likewise, tanhf within 2 ulp: the same bound holds). PyTorch's own float32 GELU is
//    within 1u max(1, |x|) of the reference (the file's metadata).
//  - dx = dy GELU'(x): the density term and the tanh form's slope carry x^2 (x * x rounded, then
//    scaled by a constant and a product up to x^2 in size), so 8u max(1, x^2) (|dy| <= 1).
// Measured on this file (2026-12-03, glibc 2.36): y within 0.94u (exact) and 0.99u (tanh) of it,
// dx within 0.5u, on the same scales.
// A wrong constant (0.0447 for 0.044715) misses by 9e-6 (near x = -1.8, ten times the bound),
// the other form by 5e-4; the structural values are exact: GELU(+-0) = +-0 (the sign checked),
// GELU(x) = x for x >= 20, -0 for x <= -20, and saturated gradients (1 and 0), never a NaN from
// x^2 overflowing at 1e20.
TEST(Activations, GeluMatchesPyTorch) {
  const char* env = std::getenv("EMBER_PARITY_DIR");  // a copy of the tree elsewhere (gpu_check.sh)
  std::map<std::string, Tensor> ref;
  for (auto& [name, t] :
       read_safetensors(std::string(env && *env ? env : EMBER_PARITY_DIR) + "/gelu_pytorch.safetensors").tensors)
    ref.emplace(name, t);
  const Tensor& x = ref.at("x");
  const Tensor& dy = ref.at("dy");
  const int64_t n = x.numel();
  const float* xs = x.f32();
  constexpr double kU = 1.0 / (1 << 23);
  for (const bool approximate : {false, true}) {
    const std::string key = approximate ? "tanh" : "exact";
    GELU gelu(approximate);
    EXPECT_EQ(gelu.approximate(), approximate);
    test::build_standalone(gelu, Shape{n}, 1);
    gelu.set_needs_input_grad(true);
    const std::vector<float> y = gelu.forward(x.reshape(Shape{1, n}), true).to_vector();
    const std::vector<float> dx = gelu.backward(dy.reshape(Shape{1, n})).to_vector();
    const float* ry = ref.at(key + "/y").f32();
    const float* rdx = ref.at(key + "/dx").f32();
    for (int64_t i = 0; i < n; ++i) {
      const double scale = std::max(1.0, std::abs(double(xs[i])));
      EXPECT_LE(std::abs(double(y[i]) - ry[i]), 4 * kU * scale) << key << " y at x = " << xs[i];
      EXPECT_LE(std::abs(double(dx[i]) - rdx[i]), 8 * kU * scale * scale) << key << " dx at x = " << xs[i];
      if (std::abs(xs[i]) >= 20.0f || xs[i] == 0.0f) {  // exact (y's sign too)
        EXPECT_EQ(std::signbit(y[i]), std::signbit(ry[i])) << key << " at x = " << xs[i];
        EXPECT_EQ(y[i], ry[i]) << key << " at x = " << xs[i];
        EXPECT_EQ(dx[i], rdx[i]) << key << " dx at x = " << xs[i];
      }
    }
  }
}

TEST(Activations, GeluGradientsMatchFiniteDifferences) {
  for (const bool approximate : {false, true}) {
    GELU gelu(approximate);
    test::build_standalone(gelu, Shape{2, 3, 3}, 1);
    test::check_layer_gradients(gelu, test::random_tensor(Shape{2, 2, 3, 3}, 8, -3.0f, 3.0f), 5);
  }
}

TEST(Activations, RejectBadArguments) {
  EXPECT_THROW(LeakyReLU(-0.1f), ArgumentError);
  EXPECT_THROW(LeakyReLU(std::nanf("")), ArgumentError);
  Softmax softmax;
  EXPECT_THROW(softmax.build(Shape{3, 4, 5}), ShapeError);  // over features only: Flatten first
}

TEST(Softmax, RowsAreStableProbabilities) {
  Softmax layer;
  test::build_standalone(layer, Shape{5}, 1);
  // Logits of 1000 would overflow exp() without the max subtraction.
  const Tensor x = Tensor::from_vector(Shape{2, 5}, std::vector<float>{1000, 1001, 1002, 999, 1000, -3, 0, 2, 1, -1});
  const std::vector<float> y = layer.forward(x, false).to_vector();
  const std::vector<float> in = x.to_vector();
  for (int r = 0; r < 2; ++r) {
    double sum = 0, denom = 0;
    double m = -1e30;
    for (int j = 0; j < 5; ++j) m = std::max(m, double(in[r * 5 + j]));
    for (int j = 0; j < 5; ++j) denom += std::exp(double(in[r * 5 + j]) - m);
    for (int j = 0; j < 5; ++j) {
      ASSERT_TRUE(std::isfinite(y[r * 5 + j]));
      EXPECT_NEAR(y[r * 5 + j], std::exp(double(in[r * 5 + j]) - m) / denom, 1e-6);
      sum += y[r * 5 + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
}

TEST(Softmax, GradientsMatchFiniteDifferences) {
  Softmax layer;
  test::build_standalone(layer, Shape{6}, 1);
  test::check_layer_gradients(layer, test::random_tensor(Shape{4, 6}, 9, -2.0f, 2.0f), 5);
}

// A model ending in Softmax trains on its logits: the same loss, gradients and parameters as
// the model without it, while predict() gives the probabilities.
TEST(Softmax, AsTheLastLayerTheLossReadsTheLogits) {
  auto make = [](bool softmax) {
    auto m = std::make_unique<Sequential>();
    m->add<Flatten>();
    m->add<Dense>(8, Activation::ReLU);
    m->add<Dense>(4);
    if (softmax) m->add<Softmax>();
    m->build(Shape{1, 3, 3}, 11);
    m->compile(std::make_unique<Adam>(AdamOptions{.learning_rate = 1e-2f}));
    return m;
  };
  auto with = make(true), without = make(false);
  const Tensor x = test::random_tensor(Shape{6, 1, 3, 3}, 2);
  Tensor labels = Tensor::zeros(Shape{6}, DType::I32, Device::cpu());
  for (int i = 0; i < 6; ++i) labels.data<int32_t>()[i] = i % 4;
  for (int step = 0; step < 3; ++step) {
    const float a = with->train_step(x, labels);
    const float b = without->train_step(x, labels);
    EXPECT_EQ(a, b) << "step " << step;
    ASSERT_TRUE(std::isfinite(a));
  }
  EXPECT_EQ(with->params().to_vector(), without->params().to_vector());
  const std::vector<float> probs = with->predict(x).to_vector();
  const std::vector<float> logits = without->predict(x).to_vector();
  for (int r = 0; r < 6; ++r) {
    double denom = 0, sum = 0;
    for (int j = 0; j < 4; ++j) denom += std::exp(double(logits[r * 4 + j]));
    for (int j = 0; j < 4; ++j) {
      EXPECT_NEAR(probs[r * 4 + j], std::exp(double(logits[r * 4 + j])) / denom, 1e-6);
      sum += probs[r * 4 + j];
    }
    EXPECT_NEAR(sum, 1.0, 1e-6);
  }
  Tensor images = Tensor::zeros(Shape{6, 1, 3, 3}, DType::U8, Device::cpu());
  for (int64_t i = 0; i < images.numel(); ++i) images.data<uint8_t>()[i] = static_cast<uint8_t>((i * 37) % 256);
  const Dataset data(images, labels, 4);
  const EvalResult e1 = with->evaluate(data), e2 = without->evaluate(data);
  EXPECT_EQ(e1.loss, e2.loss);
  EXPECT_EQ(e1.accuracy, e2.accuracy);
}

// Conv2D(..., a) and Dense(..., a) are the layer followed by a's layer of its own, bit for bit: the
// losses and parameters of three Adam steps (images through Conv2D and a MaxPool2D, which the CPU
// would fuse with a plain or ReLU convolution; steps through Dense on the last axis), and the
// activation comes back from a saved file.
TEST(Activations, AsALayersActivationTheyAreTheirOwnLayer) {
  const auto own_layer = [](Activation a) -> std::shared_ptr<Layer> {
    switch (a) {
      case Activation::Sigmoid:
        return std::make_shared<Sigmoid>();
      case Activation::Tanh:
        return std::make_shared<Tanh>();
      case Activation::GELU:
        return std::make_shared<GELU>(false);
      default:
        return std::make_shared<GELU>(true);
    }
  };
  for (const Activation a : {Activation::Sigmoid, Activation::Tanh, Activation::GELU, Activation::GELUTanh}) {
    SCOPED_TRACE(activation_name(a));
    // (1, 6, 6) images and (6, 6) sequences: the same input tensor read both ways.
    const auto make = [&](bool fused, bool images) {
      SymbolicTensor in = Input(images ? Shape{1, 6, 6} : Shape{6, 6});
      SymbolicTensor h = in;
      if (images) {
        h = layer<Conv2D>(4, Size2{3, 3}, fused ? a : Activation::None, Padding::Same)(h);
        if (!fused) h = call_layer(own_layer(a), {h});
        h = layer<Flatten>()(layer<MaxPool2D>(Size2{2, 2})(h));  // never fused with the activation's conv
      } else {
        h = layer<Dense>(5, fused ? a : Activation::None)(h);
        if (!fused) h = call_layer(own_layer(a), {h});
        h = layer<Flatten>()(h);
      }
      h = layer<Dense>(7, fused ? a : Activation::None)(h);
      if (!fused) h = call_layer(own_layer(a), {h});
      auto m = std::make_unique<Model>(in, layer<Dense>(3)(h));
      m->build(5);
      m->compile(std::make_unique<Adam>(AdamOptions{.learning_rate = 1e-2f}));
      return m;
    };
    for (const bool images : {true, false}) {
      auto fused = make(true, images), separate = make(false, images);
      for (auto& [name, view] : separate->named_params())
        for (auto& [other, from] : fused->named_params())
          if (other == name) view.copy_from(from);
      const Tensor x = test::random_tensor(images ? Shape{8, 1, 6, 6} : Shape{8, 6, 6}, 3, -2.0f, 2.0f);
      const Tensor labels = test::cycling_labels(8, 3);
      for (int step = 0; step < 3; ++step) EXPECT_EQ(fused->train_step(x, labels), separate->train_step(x, labels));
      EXPECT_EQ(fused->params().to_vector(), separate->params().to_vector());
      const std::string dir = test::temp_dir("fused_activation");
      fused->save(dir + "/m.st");
      auto back = load_model(dir + "/m.st");
      EXPECT_EQ(back->predict(x).to_vector(), fused->predict(x).to_vector());
      EXPECT_EQ(back->layers()[0]->config().at("activation"), activation_name(a));
      std::filesystem::remove_all(dir);
    }
  }
}

}  // namespace
}  // namespace ember
