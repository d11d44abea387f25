// Dense: forward values against a naive loop, gradients, on the last axis of a sequence, bad shapes.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "idx_fixtures.h"
#include "test_util.h"

namespace ember {
namespace {

TEST(Dense, ForwardMatchesNaive) {
  Dense dense(5, Activation::ReLU);
  test::build_standalone(dense, Shape{7}, 1);
  const Tensor x = test::random_tensor(Shape{3, 7}, 2);
  const std::vector<float> y = dense.forward(x, false).to_vector();
  const float *w = dense.params()[0].f32(), *b = dense.params()[1].f32(), *xp = x.f32();
  for (int i = 0; i < 3; ++i)
    for (int o = 0; o < 5; ++o) {
      double acc = b[o];
      for (int k = 0; k < 7; ++k) acc += double(xp[i * 7 + k]) * w[o * 7 + k];  // W is (out, in)
      // sgemm blocks the 7-term sum differently; 1e-5 is ~100 ulps of O(1) values.
      EXPECT_NEAR(y[static_cast<size_t>(i * 5 + o)], std::max(acc, 0.0), 1e-5);
    }
}

TEST(Dense, Gradients) {
  Dense dense(4);
  test::build_standalone(dense, Shape{6}, 3);
  test::check_layer_gradients(dense, test::random_tensor(Shape{3, 6}, 4), 5);
}

TEST(Dense, GradientsWithRelu) {
  Dense dense(4, Activation::ReLU);
  test::build_standalone(dense, Shape{6}, 6);
  test::check_layer_gradients(dense, test::random_tensor(Shape{3, 6}, 7), 8);
}

TEST(Dense, BackwardLeavesCallersGradientIntact) {
  Dense dense(3, Activation::ReLU);
  test::build_standalone(dense, Shape{4}, 1);
  dense.forward(test::random_tensor(Shape{2, 4}, 2), true);
  const Tensor dy = test::random_tensor(Shape{2, 3}, 3);
  const std::vector<float> before = dy.to_vector();
  dense.backward(dy);
  EXPECT_EQ(dy.to_vector(), before);
}

// A longer sample, as Keras' Dense: (N, T, in) -> (N, T, units), each of the N * T rows through the
// same kernel, so the bits are the (N * T, in) batch's, forward and backward, the parameter
// gradients included (they sum the same rows in the same order).
TEST(Dense, OnTheLastAxisOfASequenceEachStepIsARow) {
  Dense seq(5, Activation::ReLU), rows(5, Activation::ReLU);
  EXPECT_EQ(test::build_standalone(seq, Shape{4, 7}, 1), (Shape{4, 5}));
  test::build_standalone(rows, Shape{7}, 1);  // the same seed and fans: the same parameters
  ASSERT_EQ(seq.params()[0].to_vector(), rows.params()[0].to_vector());
  const Tensor x = test::random_tensor(Shape{3, 4, 7}, 2);
  const Tensor& y = seq.forward(x, true);
  EXPECT_EQ(y.shape(), (Shape{3, 4, 5}));
  EXPECT_EQ(y.to_vector(), rows.forward(x.reshape(Shape{12, 7}), true).to_vector());
  const Tensor dy = test::random_tensor(Shape{3, 4, 5}, 3);
  const Tensor& dx = seq.backward(dy);
  EXPECT_EQ(dx.shape(), x.shape());
  EXPECT_EQ(dx.to_vector(), rows.backward(dy.reshape(Shape{12, 5})).to_vector());
  for (size_t k = 0; k < 2; ++k) EXPECT_EQ(seq.grads()[k].to_vector(), rows.grads()[k].to_vector()) << k;
  EXPECT_EQ(seq.forward(x, false).shape(), (Shape{3, 4, 5}));
  seq.release_buffers();  // an inference pass's: the reshaped output goes with the rest
  EXPECT_THROW(seq.backward(dy), Error);
}

TEST(Dense, SequenceGradients) {
  Dense dense(4, Activation::ReLU);
  test::build_standalone(dense, Shape{3, 6}, 9);
  test::check_layer_gradients(dense, test::random_tensor(Shape{2, 3, 6}, 10), 11);
}

// A model over (time, features): Dense per step, Flatten, a classifier; saved and recreated from
// the file alone, it predicts the same bits.
TEST(Dense, ASequenceModelTrainsAndComesBack) {
  SymbolicTensor in = Input(Shape{5, 6}, "steps");
  SymbolicTensor h = layer<Dense>(8, Activation::ReLU)(in);
  Model m(in, layer<Dense>(3)(layer<Flatten>()(h)), "per_step");
  m.build(3);
  EXPECT_EQ(m.layer_output_shapes()[0], (Shape{5, 8}));
  m.compile(std::make_unique<Adam>());
  const Tensor x = test::random_tensor(Shape{16, 5, 6}, 4);
  const Tensor labels = test::cycling_labels(16, 3);
  const float first = m.train_step(x, labels);
  float last = first;
  for (int i = 0; i < 20; ++i) last = m.train_step(x, labels);
  EXPECT_LT(last, first);  // 21 Adam steps on one batch of 16: it fits
  const std::string dir = test::temp_dir("dense_seq");
  m.save(dir + "/m.st");
  EXPECT_EQ(load_model(dir + "/m.st")->predict(x).to_vector(), m.predict(x).to_vector());
  std::filesystem::remove_all(dir);
}

TEST(Dense, RejectsBadShapes) {
  Dense dense(4);
  EXPECT_THROW(dense.build(Shape{2, 3, 3}), ShapeError);  // an image: Flatten first
  EXPECT_THROW(dense.build(Shape{}), ShapeError);
  EXPECT_THROW(dense.build(Shape{3, 0}), ShapeError);
  EXPECT_THROW(Dense(0), ArgumentError);
  test::build_standalone(dense, Shape{6}, 1);
  EXPECT_THROW(dense.forward(Tensor::zeros(Shape{2, 5}), false), ShapeError);
  Dense seq(4);
  test::build_standalone(seq, Shape{3, 6}, 1);
  EXPECT_THROW(seq.forward(Tensor::zeros(Shape{2, 3, 5}), false), ShapeError);
  EXPECT_THROW(seq.forward(Tensor::zeros(Shape{2, 18}), false), ShapeError);
}

}  // namespace
}  // namespace ember
