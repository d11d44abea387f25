// BatchNormalization: training and inference against a double-precision reference, the
// running statistics (Keras' momentum, Bessel's correction), gradients by finite differences,
// the model's state buffer, summary(), a checkpoint round trip and bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "test_util.h"

namespace ember {
namespace {

struct Stats {
  std::vector<double> mean, var;  // biased
  int64_t m = 0;
};

// Per-channel statistics of a row-major (N, C, ...) tensor.
Stats channel_stats(const Tensor& x) {
  const int64_t n = x.dim(0), c = x.dim(1), hw = x.numel() / (n * c);
  const std::vector<float> v = x.to_vector();
  Stats s{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0), n * hw};
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t j = 0; j < hw; ++j) s.mean[ch] += v[(i * c + ch) * hw + j];
  for (auto& m : s.mean) m /= double(s.m);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t j = 0; j < hw; ++j) {
        const double d = v[(i * c + ch) * hw + j] - s.mean[ch];
        s.var[ch] += d * d;
      }
  for (auto& q : s.var) q /= double(s.m);
  return s;
}

void expect_normalised(const Shape& shape) {
  BatchNormalization bn;
  test::build_standalone(bn, shape.without_batch(), 1);
  const Tensor x = test::random_tensor(shape, 2, -3.0f, 5.0f);
  const Stats s = channel_stats(x);
  const std::vector<float> gamma = bn.params()[0].to_vector(), beta = bn.params()[1].to_vector();
  const std::vector<float> y = bn.forward(x, true).to_vector(), in = x.to_vector();
  const int64_t n = shape[0], c = shape[1], hw = x.numel() / (n * c);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t j = 0; j < hw; ++j) {
        const size_t k = static_cast<size_t>((i * c + ch) * hw + j);
        const double want = gamma[ch] * (in[k] - s.mean[ch]) / std::sqrt(s.var[ch] + 1e-3) + beta[ch];
        EXPECT_NEAR(y[k], want, 1e-5 * std::max(1.0, std::abs(want))) << k;
      }
  // The running statistics moved 1% of the way (momentum 0.99) from 0 and 1, the variance's
  // with Bessel's correction.
  const std::vector<float> rm = bn.state()[0].to_vector(), rv = bn.state()[1].to_vector();
  for (int64_t ch = 0; ch < c; ++ch) {
    EXPECT_NEAR(rm[ch], 0.01 * s.mean[ch], 1e-6);
    EXPECT_NEAR(rv[ch], 0.99 + 0.01 * s.var[ch] * double(s.m) / double(s.m - 1), 1e-6);
  }
}

TEST(BatchNormalization, TrainingNormalisesPerChannelAndMovesTheRunningStatistics) {
  expect_normalised(Shape{4, 3, 5, 6});  // after a convolution: per channel over N, H, W
  expect_normalised(Shape{16, 7});       // after Dense: per feature over N
}

TEST(BatchNormalization, TheLayoutOfTheInputDoesNotMatter) {
  BatchNormalization a, b;
  test::build_standalone(a, Shape{3, 4, 4}, 1);
  test::build_standalone(b, Shape{3, 4, 4}, 1);
  const Tensor x = test::random_tensor(Shape{5, 3, 4, 4}, 2);
  const std::vector<float> ya = a.forward(x, true).to_vector();
  const std::vector<float> yb = b.forward(x.to_layout(Layout::NHWC), true).to_vector();
  EXPECT_EQ(ya, yb);
  EXPECT_EQ(a.state()[1].to_vector(), b.state()[1].to_vector());
}

TEST(BatchNormalization, InferenceUsesTheRunningStatistics) {
  BatchNormalization bn(0.9f, 1e-2f);
  test::build_standalone(bn, Shape{2, 3, 3}, 1);
  Tensor(bn.state()[0]).copy_from(Tensor::from_vector(Shape{2}, std::vector<float>{0.5f, -1.0f}));
  Tensor(bn.state()[1]).copy_from(Tensor::from_vector(Shape{2}, std::vector<float>{4.0f, 0.25f}));
  const Tensor x = test::random_tensor(Shape{3, 2, 3, 3}, 2);
  const std::vector<float> y = bn.forward(x, false).to_vector(), in = x.to_vector();
  const std::vector<float> g = bn.params()[0].to_vector(), b = bn.params()[1].to_vector();
  const double mean[2] = {0.5, -1.0}, var[2] = {4.0, 0.25};
  for (size_t k = 0; k < in.size(); ++k) {
    const size_t ch = (k / 9) % 2;
    EXPECT_NEAR(y[k], g[ch] * (in[k] - mean[ch]) / std::sqrt(var[ch] + 1e-2) + b[ch], 1e-5) << k;
  }
  EXPECT_EQ(bn.state()[0].to_vector(), (std::vector<float>{0.5f, -1.0f}));  // inference moves nothing
}

TEST(BatchNormalization, GradientsMatchFiniteDifferences) {
  // The batch statistics depend on every input: the check covers the full Jacobian.
  test::GradCheckOptions opt;
  opt.step = 1e-2;
  BatchNormalization conv_bn;
  test::build_standalone(conv_bn, Shape{3, 3, 3}, 1);
  conv_bn.set_needs_input_grad(true);
  test::check_layer_gradients(conv_bn, test::random_tensor(Shape{2, 3, 3, 3}, 3), 5, opt);
  BatchNormalization dense_bn;
  test::build_standalone(dense_bn, Shape{5}, 1);
  test::check_layer_gradients(dense_bn, test::random_tensor(Shape{6, 5}, 4), 5, opt);
}

TEST(BatchNormalization, RejectsBadArguments) {
  EXPECT_THROW(BatchNormalization(1.0f), ArgumentError);
  EXPECT_THROW(BatchNormalization(-0.5f), ArgumentError);
  EXPECT_THROW(BatchNormalization(0.99f, 0.0f), ArgumentError);
  BatchNormalization bn;
  EXPECT_THROW(bn.build(Shape{3, 4}), ShapeError);
  // One value per channel in training: no variance (as PyTorch, refused on every backend).
  BatchNormalization one;
  test::build_standalone(one, Shape{5}, 1);
  EXPECT_THROW(one.forward(test::random_tensor(Shape{1, 5}, 2), true), ShapeError);
  EXPECT_NO_THROW(one.forward(test::random_tensor(Shape{1, 5}, 2), false));  // inference is fine
}

std::unique_ptr<Sequential> bn_model() {
  auto m = std::make_unique<Sequential>();
  m->add<Conv2D>(4, Size2{3, 3});
  m->add<BatchNormalization>();
  m->add<ReLU>();
  m->add<Flatten>();
  m->add<Dense>(6);
  m->add<BatchNormalization>();
  m->add<Dense>(3);
  m->build(Shape{1, 5, 5}, 3);
  m->compile(std::make_unique<Adam>(AdamOptions{.learning_rate = 1e-2f}));
  return m;
}

TEST(BatchNormalization, StateLivesInTheModelsStateBufferAndShowsInSummary) {
  auto m = bn_model();
  // Moving statistics: 2 x 4 + 2 x 6 values, in one averaged region; each view on a 256-byte
  // boundary of the buffer (Model::kViewAlignment: 64 floats each, the rest zero padding).
  EXPECT_EQ(m->state().numel(), 4 * 64);
  EXPECT_EQ(m->num_non_trainable(), 20);
  EXPECT_EQ(m->averaged_state().numel(), 4 * 64);
  const auto named = m->named_state();
  ASSERT_EQ(named.size(), 4u);
  EXPECT_EQ(named[0].first, "batch_normalization/moving_mean");
  EXPECT_EQ(named[3].first, "batch_normalization_1/moving_variance");
  EXPECT_EQ(named[1].second.to_vector(), std::vector<float>(4, 1.0f));  // variance starts at 1
  const std::string s = m->summary();
  // Keras' rows: gamma, beta, moving mean and variance per channel.
  const size_t row = s.find(" batch_normalization (BatchNormalization)");
  ASSERT_NE(row, std::string::npos) << s;
  const std::string line = s.substr(row, s.find('\n', row) - row);
  EXPECT_EQ(line.substr(line.size() - 3), " 16") << line;  // 4 channels x 4
  const int64_t trainable = m->num_params();
  EXPECT_NE(s.find("Total params: " + std::to_string(trainable + 20)), std::string::npos) << s;
  EXPECT_NE(s.find("Non-trainable params: 20"), std::string::npos) << s;
}

TEST(BatchNormalization, ACheckpointCarriesTheRunningStatistics) {
  auto m = bn_model();
  const Tensor x = test::random_tensor(Shape{8, 1, 5, 5}, 2, 0.0f, 1.0f);
  Tensor labels = Tensor::zeros(Shape{8}, DType::I32, Device::cpu());
  for (int i = 0; i < 8; ++i) labels.data<int32_t>()[i] = i % 3;
  for (int i = 0; i < 3; ++i) m->train_step(x, labels);
  const auto path = std::filesystem::temp_directory_path() / "ember_bn_state.safetensors";
  m->save(path.string());
  auto fresh = bn_model();
  EXPECT_NE(fresh->state().to_vector(), m->state().to_vector());
  fresh->load(path.string());
  std::filesystem::remove(path);
  EXPECT_EQ(fresh->state().to_vector(), m->state().to_vector());
  EXPECT_EQ(fresh->predict(x).to_vector(), m->predict(x).to_vector());  // inference reads them
}

}  // namespace
}  // namespace ember
