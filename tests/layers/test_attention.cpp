// MultiHeadAttention: the forward against a double-precision loop (causal and not, with dropout and
// without), a causal step blind to later steps (its output bits and the gradient reaching them),
// gradients by finite differences (with a fixed dropout mask too), the batch's halves adding up, a
// model trained, saved and recreated, bad arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "idx_fixtures.h"
#include "layers/cpu/attention.h"
#include "layers/random_bits.h"
#include "test_util.h"

namespace ember {
namespace {

// The layer's definition in double from its parameters: qkv = x Wqkv^T + b, per head softmax(Q K^T
// / sqrt(Dk)) V (masked when causal; with `drop`, each probability kept by Dropout's bits for its
// index in the (N * H, T, T) probabilities and scaled), y = heads Wo^T + bo.
std::vector<double> reference(const MultiHeadAttention& l, const Tensor& x,
                              const cpu::AttentionDropout* drop = nullptr) {
  const int64_t n = x.dim(0), t = x.dim(1), c = x.dim(2), h = l.num_heads(), dk = l.key_dim();
  const int64_t dv = l.options().value_dim, w = h * (2 * dk + dv), o = l.params()[2].dim(0);
  const float *wq = l.params()[0].f32(), *bq = l.params()[1].f32(), *wo = l.params()[2].f32(),
              *bo = l.params()[3].f32();
  std::vector<double> qkv(static_cast<size_t>(n * t * w)), heads(static_cast<size_t>(n * t * h * dv)), y;
  for (int64_t r = 0; r < n * t; ++r)
    for (int64_t j = 0; j < w; ++j) {
      double s = bq[j];
      for (int64_t k = 0; k < c; ++k) s += double(x.f32()[r * c + k]) * wq[j * c + k];
      qkv[static_cast<size_t>(r * w + j)] = s;
    }
  for (int64_t s = 0; s < n; ++s)
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t i = 0; i < t; ++i) {
        const int64_t last = l.options().causal ? i : t - 1;
        std::vector<double> p(static_cast<size_t>(last + 1));
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= last; ++j) {
          double d = 0;
          for (int64_t k = 0; k < dk; ++k)
            d += qkv[static_cast<size_t>((s * t + i) * w + hh * dk + k)] *
                 qkv[static_cast<size_t>((s * t + j) * w + h * dk + hh * dk + k)];
          p[static_cast<size_t>(j)] = d / std::sqrt(double(dk));
          m = std::max(m, p[static_cast<size_t>(j)]);
        }
        for (double& v : p) sum += (v = std::exp(v - m));
        for (int64_t k = 0; k < dv; ++k) {
          double a = 0;
          for (int64_t j = 0; j <= last; ++j) {
            const auto index = static_cast<uint64_t>(((s * h + hh) * t + i) * t + j);
            const double keep =
                !drop ? 1.0 : (detail::element_bits24(drop->key, index) >= drop->threshold ? drop->scale : 0.0);
            a += keep * p[static_cast<size_t>(j)] / sum *
                 qkv[static_cast<size_t>((s * t + j) * w + 2 * h * dk + hh * dv + k)];
          }
          heads[static_cast<size_t>((s * t + i) * h * dv + hh * dv + k)] = a;
        }
      }
  for (int64_t r = 0; r < n * t; ++r)
    for (int64_t j = 0; j < o; ++j) {
      double s = bo[j];
      for (int64_t k = 0; k < h * dv; ++k) s += heads[static_cast<size_t>(r * h * dv + k)] * wo[j * h * dv + k];
      y.push_back(s);
    }
  return y;
}

// Two samples of 5 steps, 6 features, 2 heads of key width 3 and value width 4, 5 outputs. Each
// value is a chain of float dot products of <= 8 terms, a softmax and two more products: a few ulp
// per stage of values O(1), so 2e-6 of max(1, |y|) (~16 ulp) covers it; a wrong scale (1/Dk for
// 1/sqrt(Dk)), a missed mask or a swapped head moves outputs by 1e-2 or more.
TEST(MultiHeadAttention, ForwardMatchesADoubleLoop) {
  for (const bool causal : {false, true}) {
    MultiHeadAttention l(2, 3, {.value_dim = 4, .causal = causal, .output_dim = 5});
    EXPECT_EQ(test::build_standalone(l, Shape{5, 6}, 1), (Shape{5, 5}));
    const Tensor x = test::random_tensor(Shape{2, 5, 6}, 2, -2.0f, 2.0f);
    const std::vector<float> y = l.forward(x, false).to_vector();
    const std::vector<double> want = reference(l, x);
    double worst = 0;
    for (size_t i = 0; i < y.size(); ++i)
      worst = std::max(worst, std::abs(y[i] - want[i]) / std::max(1.0, std::abs(want[i])));
    EXPECT_LE(worst, 2e-6) << "causal " << causal;
  }
}

// Under the causal mask step i never sees steps after it: changing the last step leaves every
// earlier output's bits as they were, and a loss on the earlier outputs sends the last step an
// exactly zero gradient.
TEST(MultiHeadAttention, ACausalStepIsBlindToLaterSteps) {
  MultiHeadAttention l(2, 4, {.causal = true});
  test::build_standalone(l, Shape{6, 8}, 3);
  Tensor x = test::random_tensor(Shape{1, 6, 8}, 4);
  const std::vector<float> before = l.forward(x, true).to_vector();
  Tensor dy = Tensor::zeros(Shape{1, 6, 8});
  for (int64_t i = 0; i < 5 * 8; ++i) dy.f32()[i] = 0.25f + 0.01f * float(i);  // the first 5 steps only
  const std::vector<float> dx = l.backward(dy).to_vector();
  for (int64_t k = 0; k < 8; ++k) EXPECT_EQ(dx[static_cast<size_t>(5 * 8 + k)], 0.0f);
  for (int64_t k = 0; k < 8; ++k) x.f32()[5 * 8 + k] += 1.0f;
  const std::vector<float> after = l.forward(x, false).to_vector();
  for (int64_t i = 0; i < 5 * 8; ++i) EXPECT_EQ(after[static_cast<size_t>(i)], before[static_cast<size_t>(i)]) << i;
}

TEST(MultiHeadAttention, GradientsMatchFiniteDifferences) {
  for (const bool causal : {false, true}) {
    MultiHeadAttention l(2, 3, {.value_dim = 2, .causal = causal, .output_dim = 4});
    test::build_standalone(l, Shape{4, 5}, 5);
    test::check_layer_gradients(l, test::random_tensor(Shape{2, 4, 5}, 6), 7);
  }
}

// 8 samples of 8 steps (64 rows: 4 groups): the projections' gradients in the batch's sum order,
// so the halves' add up to the whole batch's bit for bit.
TEST(MultiHeadAttention, HalvesAddUpToTheWholeBatch) {
  MultiHeadAttention l(2, 4, {.causal = true});
  test::build_standalone(l, Shape{8, 8}, 8);
  const Tensor x = test::random_tensor(Shape{8, 8, 8}, 9), dy = test::random_tensor(Shape{8, 8, 8}, 10);
  const auto grads = [&](const Tensor& xs, const Tensor& ds) {
    l.forward(xs, true);
    l.backward(ds);
    std::vector<std::vector<float>> g;
    for (const Tensor& t : l.grads()) g.push_back(t.to_vector());
    return g;
  };
  const auto whole = grads(x, dy);
  const auto a = grads(x.rows(0, 4).clone(), dy.rows(0, 4).clone());
  const auto b = grads(x.rows(4, 4).clone(), dy.rows(4, 4).clone());
  for (size_t p = 0; p < whole.size(); ++p)
    for (size_t i = 0; i < whole[p].size(); ++i) EXPECT_EQ(whole[p][i], a[p][i] + b[p][i]) << p << ", " << i;
}

// Dropout 0.3 in training: the double loop with Dropout's mask of the probabilities, drawn from
// the layer's seed and its step counter (0, then 1: the counter advances once per training forward,
// and the second mask differs). Evaluation never drops: the plain loop's values. Bounds as above.
TEST(MultiHeadAttention, DropoutMatchesADoubleLoop) {
  for (const bool causal : {false, true}) {
    MultiHeadAttention l(2, 3, {.value_dim = 4, .causal = causal, .output_dim = 5, .dropout = 0.3f});
    test::build_standalone(l, Shape{5, 6}, 1);
    ASSERT_EQ(l.state().size(), 1u);
    const Tensor x = test::random_tensor(Shape{2, 5, 6}, 2, -2.0f, 2.0f);
    const uint32_t threshold = static_cast<uint32_t>(std::ceil(0.3 * detail::kCounterBase));
    std::vector<float> previous;
    for (uint64_t step = 0; step < 2; ++step) {
      const std::vector<float> y = l.forward(x, true).to_vector();
      const cpu::AttentionDropout d{
          .key = detail::step_key(l.random_seed(), step), .threshold = threshold, .scale = 1.0f / 0.7f};
      const std::vector<double> want = reference(l, x, &d);
      double worst = 0;
      for (size_t i = 0; i < y.size(); ++i)
        worst = std::max(worst, std::abs(y[i] - want[i]) / std::max(1.0, std::abs(want[i])));
      EXPECT_LE(worst, 2e-6) << "causal " << causal << ", step " << step;
      EXPECT_NE(y, previous);
      previous = y;
    }
    EXPECT_EQ(detail::counter_value(l.state()[0].f32()), 2u);
    const std::vector<float> y = l.forward(x, false).to_vector();
    const std::vector<double> want = reference(l, x);
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], want[i], 2e-6 * std::max(1.0, std::abs(want[i])));
    EXPECT_EQ(detail::counter_value(l.state()[0].f32()), 2u);
  }
}

// The backward with a dropout mask (fixed: the op's key, not the layer's advancing counter) against
// central differences of sum(out * dout) over qkv, in double from the float forward: a step of 1e-2
// on values O(1) leaves ~1e-4 of float noise in each difference, so 2e-3 of max(1, |numeric|)
// (a wrong mask or a missed scale moves a gradient by a third or more).
TEST(MultiHeadAttention, DropoutGradientsMatchFiniteDifferences) {
  for (const bool causal : {false, true}) {
    const detail::AttentionShape g{.n = 2, .t = 5, .heads = 2, .key_dim = 3, .value_dim = 2, .causal = causal};
    const cpu::AttentionDropout d{.key = detail::step_key(9, 4),
                                  .threshold = static_cast<uint32_t>(std::ceil(0.4 * detail::kCounterBase)),
                                  .scale = 1.0f / 0.6f};
    Tensor qkv = test::random_tensor(Shape{g.n * g.t, g.width()}, 21, -1.5f, 1.5f);
    const Tensor dout = test::random_tensor(Shape{g.n * g.t, g.heads * g.value_dim}, 22);
    Tensor probs = Tensor::empty(Shape{g.n * g.heads, g.t, g.t}), out = Tensor::empty(dout.shape());
    Tensor dqkv = Tensor::empty(qkv.shape()), scratch;
    const auto loss = [&] {
      cpu::attention_forward(g, qkv, probs, out, scratch, &d);
      double s = 0;
      for (int64_t i = 0; i < out.numel(); ++i) s += double(out.f32()[i]) * dout.f32()[i];
      return s;
    };
    loss();
    cpu::attention_backward(g, qkv, probs, dout, dqkv, scratch, &d);
    const std::vector<float> analytic = dqkv.to_vector();
    double worst = 0;
    int64_t dropped_somewhere = 0;
    for (int64_t i = 0; i < qkv.numel(); ++i) {
      const float saved = qkv.f32()[i];
      qkv.f32()[i] = saved + 1e-2f;
      const double up = loss();
      qkv.f32()[i] = saved - 1e-2f;
      const double down = loss();
      qkv.f32()[i] = saved;
      const double numeric = (up - down) / (2e-2);
      worst = std::max(worst, std::abs(analytic[static_cast<size_t>(i)] - numeric) / std::max(1.0, std::abs(numeric)));
    }
    for (uint64_t e = 0; e < uint64_t(probs.numel()); ++e)
      dropped_somewhere += detail::element_bits24(d.key, e) < d.threshold;
    EXPECT_GT(dropped_somewhere, 0);  // the mask drops something
    EXPECT_LE(worst, 2e-3) << "causal " << causal;
  }
}

// A one-block causal model over ids (Embedding, positions, LayerNormalization, attention with a
// residual Add and dropout 0.1, a per-step head) learns a fixed next-id rule, and comes back from
// its file alone (dropout kept; predict never drops).
TEST(MultiHeadAttention, ACausalModelTrainsAndComesBack) {
  SymbolicTensor in = Input(Shape{8}, "ids");
  SymbolicTensor h = layer<PositionEmbedding>(8)(layer<Embedding>(5, 8)(in));
  h = layer<Add>()({h, layer<MultiHeadAttention>(2, 4, AttentionOptions{.causal = true, .dropout = 0.1f})(
                           layer<LayerNormalization>(1e-5f)(h))});
  Model m(in, layer<Dense>(5)(h), "causal");
  m.build(8);
  m.compile(std::make_unique<Adam>(AdamOptions{.learning_rate = 1e-2f}));
  Tensor x = Tensor::empty(Shape{8, 8}, DType::I32), y = Tensor::empty(Shape{8, 8}, DType::I32);
  for (int64_t i = 0; i < 64; ++i) {
    x.data<int32_t>()[i] = static_cast<int32_t>((i * 3 + i / 8) % 5);
    y.data<int32_t>()[i] = (x.data<int32_t>()[i] + 1) % 5;  // the next id: learnable from the step itself
  }
  const float first = m.train_step(x, y);
  float last = first;
  for (int i = 0; i < 40; ++i) last = m.train_step(x, y);
  EXPECT_LT(last, 0.5f * first);
  const std::string dir = test::temp_dir("attention");
  m.save(dir + "/m.st");
  auto back = load_model(dir + "/m.st");
  EXPECT_EQ(back->predict(x).to_vector(), m.predict(x).to_vector());
  for (const auto& l : back->layers()) {
    if (const auto* a = dynamic_cast<const MultiHeadAttention*>(l.get())) {
      EXPECT_EQ(a->options().dropout, 0.1f);
    }
  }
  std::filesystem::remove_all(dir);
}

TEST(MultiHeadAttention, RejectsBadArgumentsAndShapes) {
  EXPECT_THROW(MultiHeadAttention(0, 4), ArgumentError);
  EXPECT_THROW(MultiHeadAttention(2, 0), ArgumentError);
  EXPECT_THROW(MultiHeadAttention(2, 4, {.value_dim = -1}), ArgumentError);
  EXPECT_THROW(MultiHeadAttention(2, 4, {.init_stddev = -0.5f}), ArgumentError);
  EXPECT_THROW(MultiHeadAttention(2, 4, {.dropout = 1.0f}), ArgumentError);
  EXPECT_THROW(MultiHeadAttention(2, 4, {.dropout = -0.1f}), ArgumentError);
  EXPECT_THROW(MultiHeadAttention(2, 4, {.dropout = std::numeric_limits<float>::quiet_NaN()}), ArgumentError);
  MultiHeadAttention l(2, 4);
  EXPECT_THROW(l.build(Shape{8}), ShapeError);
  EXPECT_THROW(l.build(Shape{2, 3, 4}), ShapeError);
  test::build_standalone(l, Shape{3, 8}, 1);
  EXPECT_THROW(l.forward(Tensor::zeros(Shape{2, 4, 8}), false), ShapeError);
  MultiHeadAttention fresh(2, 4);
  EXPECT_THROW(fresh.backward(Tensor::zeros(Shape{1, 3, 8})), Error);
}

}  // namespace
}  // namespace ember
