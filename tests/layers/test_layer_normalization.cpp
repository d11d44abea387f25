// LayerNormalization: the forward against a double-precision loop, gradients by finite
// differences, the parameter gradients in the batch's sum order at any thread count, a model
// saved and recreated, bad arguments and shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>

#include "core/pairwise_sum.h"
#include "idx_fixtures.h"
#include "test_util.h"

namespace ember {
namespace {

// y over rows of C = 40 (two full lanes of 16 and a partial one), values U(1, 5), against the
// same formula in double. The float path adds <= 3 terms per lane then folds 16 lanes (<= 7
// roundings on each sum's path), so the mean and the variance carry a few ulp; xhat = (x - mean)
// invstd then errs by a few ulp of |xhat| (<= sqrt(3) for uniform rows) and gamma and beta add
// two roundings: 16 ulp of max(1, |y|) covers it (3 measured), while a mean off by one element's
// share (~1/40) or a variance off by Bessel's 40/39 is some 1e5 ulp away.
TEST(LayerNormalization, ForwardMatchesADoubleLoop) {
  LayerNormalization ln(1e-5f);
  EXPECT_EQ(test::build_standalone(ln, Shape{3, 40}, 1), (Shape{3, 40}));
  Tensor x = test::random_tensor(Shape{4, 3, 40}, 2, 1.0f, 5.0f);
  const std::vector<float> y = ln.forward(x, false).to_vector();
  const float *g = ln.params()[0].f32(), *b = ln.params()[1].f32(), *xp = x.f32();
  double worst = 0;
  for (int64_t r = 0; r < 12; ++r) {
    double m = 0, v = 0;
    for (int k = 0; k < 40; ++k) m += xp[r * 40 + k];
    m /= 40;
    for (int k = 0; k < 40; ++k) v += (xp[r * 40 + k] - m) * (xp[r * 40 + k] - m);
    const double inv = 1.0 / std::sqrt(v / 40 + 1e-5);
    for (int k = 0; k < 40; ++k) {
      const double want = (xp[r * 40 + k] - m) * inv * g[k] + b[k];
      worst = std::max(worst, std::abs(y[r * 40 + k] - want) / std::max(1.0, std::abs(want)));
    }
  }
  EXPECT_LE(worst, 16 * std::numeric_limits<float>::epsilon());
}

TEST(LayerNormalization, GradientsMatchFiniteDifferences) {
  LayerNormalization ln;
  test::build_standalone(ln, Shape{3, 7}, 3);
  test::check_layer_gradients(ln, test::random_tensor(Shape{2, 3, 7}, 4, -2.0f, 2.0f), 5);
  LayerNormalization flat;
  test::build_standalone(flat, Shape{9}, 6);
  test::check_layer_gradients(flat, test::random_tensor(Shape{3, 9}, 7, -2.0f, 2.0f), 8);
}

// 64 rows are 4 groups of 16: the whole batch's dgamma and dbeta are ((g0 + g1) + (g2 + g3)), so
// they equal the sum of the two 32-row halves' gradients bit for bit; and the same bits on one
// thread as on two (the groups are fixed, not the threads' shares).
TEST(LayerNormalization, ParameterGradientsFollowTheBatchSumOrder) {
  LayerNormalization ln;
  test::build_standalone(ln, Shape{4, 24}, 9);
  const Tensor x = test::random_tensor(Shape{16, 4, 24}, 10, -2.0f, 2.0f);
  const Tensor dy = test::random_tensor(x.shape(), 11);
  const auto grads = [&](const Tensor& xs, const Tensor& dys) {
    ln.forward(xs, true);
    ln.backward(dys);
    return std::make_pair(ln.grads()[0].to_vector(), ln.grads()[1].to_vector());
  };
  const auto whole = grads(x, dy);
  const auto a = grads(x.rows(0, 8).clone(), dy.rows(0, 8).clone());
  const auto b = grads(x.rows(8, 8).clone(), dy.rows(8, 8).clone());
  for (size_t k = 0; k < 24; ++k) {
    EXPECT_EQ(whole.first[k], a.first[k] + b.first[k]) << k;
    EXPECT_EQ(whole.second[k], a.second[k] + b.second[k]) << k;
  }
  const int threads = num_threads();
  set_num_threads(threads == 1 ? 2 : 1);
  const auto other = grads(x, dy);
  set_num_threads(threads);
  EXPECT_EQ(other.first, whole.first);
  EXPECT_EQ(other.second, whole.second);
}

// Dense per step, LayerNormalization, a classifier: trained a few steps (the loss falls), saved and
// recreated from the file alone (epsilon kept), the same predictions' bits.
TEST(LayerNormalization, AModelTrainsAndComesBack) {
  SymbolicTensor in = Input(Shape{5, 6}, "steps");
  SymbolicTensor h = layer<LayerNormalization>(1e-5f)(layer<Dense>(8)(in));
  Model m(in, layer<Dense>(3)(layer<Flatten>()(h)), "normed");
  m.build(16);
  m.compile(std::make_unique<Adam>());
  const Tensor x = test::random_tensor(Shape{16, 5, 6}, 12);
  const Tensor labels = test::cycling_labels(16, 3);
  const float first = m.train_step(x, labels);
  float last = first;
  for (int i = 0; i < 20; ++i) last = m.train_step(x, labels);
  EXPECT_LT(last, first);
  const std::string dir = test::temp_dir("layer_norm");
  m.save(dir + "/m.st");
  auto back = load_model(dir + "/m.st");
  EXPECT_EQ(dynamic_cast<const LayerNormalization&>(*back->layers()[1]).epsilon(), 1e-5f);
  EXPECT_EQ(back->predict(x).to_vector(), m.predict(x).to_vector());
  std::filesystem::remove_all(dir);
}

TEST(LayerNormalization, RejectsBadArgumentsAndShapes) {
  EXPECT_THROW(LayerNormalization(0.0f), ArgumentError);
  EXPECT_THROW(LayerNormalization(-1.0f), ArgumentError);
  EXPECT_THROW(LayerNormalization(std::numeric_limits<float>::quiet_NaN()), ArgumentError);
  LayerNormalization ln;
  EXPECT_THROW(ln.build(Shape{}), ShapeError);
  EXPECT_THROW(ln.build(Shape{3, 0}), ShapeError);
  test::build_standalone(ln, Shape{3, 6}, 1);
  EXPECT_THROW(ln.forward(Tensor::zeros(Shape{2, 3, 5}), false), ShapeError);
  EXPECT_THROW(ln.forward(Tensor::zeros(Shape{2, 18}), false), ShapeError);
  LayerNormalization fresh;
  EXPECT_THROW(fresh.backward(Tensor::zeros(Shape{2, 3})), Error);
}

}  // namespace
}  // namespace ember
