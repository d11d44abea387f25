// CPU layer fusion (Model::set_cpu_fusion): a first-layer Conv2D -> MaxPool2D pair runs as
// one pass (layers/cpu/conv2d_maxpool.cpp) and must mean exactly what the two layers mean.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include "core/cpu/cpu_features.h"
#include "layers/cpu/conv2d_maxpool.h"
#include "test_util.h"

namespace ember {
namespace {

struct PairCase {
  const char* name;
  int64_t c, h, w, k, kernel, stride;
  Padding padding;
  Activation activation;
  int64_t pool;
  bool nhwc_input;  // x handed over channels-last (the copying path)
};
void PrintTo(const PairCase& c, std::ostream* os) { *os << c.name; }

// Multiples of 1/4 in [-2, 2] (inputs, bias) and of 1/4 in [-1, 1] (kernel): every convolution sum
// of at most 32 such products is exact in float32, so the fused and unfused convolutions give the
// same bits whatever their order of additions, and ties between window positions (frequent with
// such coarse values, and ReLU's zeros) test that both keep the first maximum.
float quarter(uint64_t& state, int range) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  const auto v = static_cast<int>((state >> 33) % static_cast<uint64_t>(2 * range + 1)) - range;
  return static_cast<float>(v) / 4.0f;
}

Tensor quarters(const Shape& shape, uint64_t seed, int range) {
  Tensor t = Tensor::empty(shape, DType::F32, Device::cpu());
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = quarter(seed, range);
  return t;
}

Sequential pair_model(const PairCase& pc, bool fusion) {
  Sequential m;
  m.add<Conv2D>(pc.k, Size2{pc.kernel, pc.kernel}, pc.activation, pc.padding, Size2{pc.stride, pc.stride});
  m.add<MaxPool2D>(Size2{pc.pool, pc.pool});
  m.add<Flatten>();
  m.add<Dense>(5);
  m.build(Shape{pc.c, pc.h, pc.w}, 3);
  EXPECT_TRUE(m.cpu_fusion());  // on by default
  m.set_cpu_fusion(fusion);
  EXPECT_EQ(m.cpu_fusion(), fusion);
  m.set_cpu_micro_batch(0);
  // The convolution's parameters on the quarter grid (the Dense keeps its Glorot values).
  uint64_t seed = 99;
  for (auto& [name, t] : m.named_params())
    if (name.rfind("conv2d/", 0) == 0)
      for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = quarter(seed, name == "conv2d/bias" ? 8 : 4);
  return m;
}

class FusedPair : public ::testing::TestWithParam<PairCase> {};

TEST_P(FusedPair, MeansWhatTheTwoLayersMean) {
  const PairCase& pc = GetParam();
  constexpr int64_t kBatch = 7;  // odd: the threads split it unevenly
  Tensor x = quarters(Shape{kBatch, pc.c, pc.h, pc.w}, 5, 8);
  if (pc.nhwc_input) x = x.to_layout(Layout::NHWC);
  const Tensor y = test::cycling_labels(kBatch, 5);
  Sequential fused = pair_model(pc, true), plain = pair_model(pc, false);
  ASSERT_TRUE(fused.fused_with_next(0)) << pc.name;
  ASSERT_FALSE(plain.fused_with_next(0));
  EXPECT_NE(fused.placement_report(kBatch).find("one pass per image"), std::string::npos)
      << fused.placement_report(kBatch);

  // Forward: the pool's output has the same bits (exact sums, the same tie rule), so the logits do.
  const std::vector<float> logits = fused.forward_logits(x, true).to_vector();
  EXPECT_EQ(logits, plain.forward_logits(x, true).to_vector());
  EXPECT_EQ(fused.forward_logits(x, false).to_vector(), logits);  // inference: no argmax, same output

  // Gradients: the Dense's are the same bits; the convolution's are the same products summed in
  // another order (per image, then over images) over kBatch * PP * QQ terms: float32 reordering
  // moves such a sum by ~1e-6 of its scale; 1e-5 leaves room and still fails on any wrong window,
  // mask or tap (those move a gradient by its own size).
  MetricSums a(Device::cpu()), b(Device::cpu());
  fused.compute_gradients(x, y, a);
  plain.compute_gradients(x, y, b);
  EXPECT_EQ(a.read().loss_sum, b.read().loss_sum);
  const auto grads = [](Sequential& m, const std::string& prefix) {
    std::vector<float> out;
    for (const auto& l : m.layers())
      if (l->name().rfind(prefix, 0) == 0)
        for (const auto& g : l->grads()) {
          const std::vector<float> v = g.to_vector();
          out.insert(out.end(), v.begin(), v.end());
        }
    return out;
  };
  EXPECT_EQ(grads(fused, "dense"), grads(plain, "dense"));
  const std::vector<float> gf = grads(fused, "conv2d"), gp = grads(plain, "conv2d");
  EXPECT_LT(test::scaled_error(gf, gp), 1e-5) << pc.name;
  EXPECT_GT(*std::max_element(gp.begin(), gp.end()), 0.0f);  // a gradient that is all zeros tests nothing
}

INSTANTIATE_TEST_SUITE_P(Shapes, FusedPair,
                         ::testing::Values(
                             // The reference CNN's first block (the unrolled 9-tap, 4-position kernels).
                             PairCase{"reference", 1, 28, 28, 32, 3, 1, Padding::Valid, Activation::ReLU, 2, false},
                             // Filters not a multiple of 8 or 16 (partial vectors); an odd output (11 -> 5: a row and a
                             // column the pool drops); no ReLU (negative maxima, every window position's gradient).
                             PairCase{"tails", 1, 13, 13, 10, 3, 1, Padding::Valid, Activation::None, 2, false},
                             // RGB, SAME padding (the zero-bordered copy), 27 taps.
                             PairCase{"rgb_same", 3, 12, 12, 20, 3, 1, Padding::Same, Activation::ReLU, 2, false},
                             // Channels-last input, 3x3 pool windows (9 positions), a 5x5 kernel at stride 2.
                             PairCase{"nhwc_strided", 1, 17, 17, 16, 5, 2, Padding::Valid, Activation::ReLU, 3, true},
                             PairCase{"nhwc_rgb", 3, 10, 10, 8, 3, 1, Padding::Valid, Activation::ReLU, 2, true},
                             // SAME padding at stride 2 (12 -> 6, the odd pad after): padding and strides together.
                             PairCase{"same_strided", 1, 12, 12, 8, 3, 2, Padding::Same, Activation::ReLU, 2, false}),
                         [](const ::testing::TestParamInfo<PairCase>& p) { return std::string(p.param.name); });

Sequential reference_first_block(uint64_t seed) {
  Sequential m;
  m.add<Conv2D>(32, Size2{3, 3}, Activation::ReLU);
  m.add<MaxPool2D>(Size2{2, 2});
  m.add<Conv2D>(16, Size2{3, 3}, Activation::ReLU);
  m.add<Flatten>();
  m.add<Dense>(10);
  m.build(Shape{1, 28, 28}, seed);
  m.set_cpu_micro_batch(0);
  return m;
}

TEST(ConvPoolFusion, SameBitsAtAnyThreadCountAndEveryRun) {
  // The pair alone, with a fixed output gradient: what the fused kernel computes, and nothing of
  // oneDNN's (whose split of work may depend on the thread count).
  const Tensor x = test::random_tensor(Shape{9, 1, 28, 28}, 7, 0.0f, 1.0f);
  const Tensor dy = test::random_tensor(Shape{9, 32, 13, 13}, 8);
  const int threads = num_threads();
  std::vector<std::vector<float>> runs;
  for (int t : {1, 2, 1}) {
    set_num_threads(t);
    Sequential m = reference_first_block(4);
    ASSERT_TRUE(m.fused_with_next(0));
    runs.push_back(m.forward_layers(x, true, 0, 2).to_vector());
    m.backward_layers(dy, 0, 2);
    for (const Tensor& g : m.layers()[0]->grads()) {
      const std::vector<float> v = g.to_vector();
      runs.back().insert(runs.back().end(), v.begin(), v.end());
    }
  }
  set_num_threads(threads);
  EXPECT_EQ(runs[1], runs[0]) << "per-image sums in the batch's sum order, whatever the thread count";
  EXPECT_EQ(runs[2], runs[0]);
}

// The kernels in 16 lanes (AVX-512) and in 8 (AVX2) give the same bits: the reference first layer
// (its unrolled kernels) and a three-channel SAME convolution under a 3x3 pool (the general ones),
// with values whose sums round, a NaN pixel and ties between window positions (ReLU's zeros).
TEST(ConvPoolFusion, SixteenLanesGiveTheEightLanesBits) {
  if (!cpu_avx512()) GTEST_SKIP() << "no AVX-512 here";
  for (const auto& [c, h, k, pool_size, padding] :
       {std::tuple{int64_t{1}, int64_t{28}, int64_t{32}, int64_t{2}, Padding::Valid},
        std::tuple{int64_t{3}, int64_t{10}, int64_t{16}, int64_t{3}, Padding::Same}}) {
    Sequential m;
    m.add<Conv2D>(k, Size2{3, 3}, Activation::ReLU, padding);
    m.add<MaxPool2D>(Size2{pool_size, pool_size});
    m.add<Flatten>();
    m.build(Shape{c, h, h}, 5);
    const int64_t n = 5;
    const Conv2dShape cg = dynamic_cast<const Conv2D&>(*m.layers()[0]).geometry(n);
    const Pool2dShape pg = dynamic_cast<const MaxPool2D&>(*m.layers()[1]).geometry(n);
    ASSERT_TRUE(cpu::conv2d_maxpool_fits(cg, pg));
    Tensor x = test::random_tensor(Shape{n, c, h, h}, 21, -1.0f, 1.0f);
    x.f32()[2 * c * h * h + 37] = std::nanf("");
    const Tensor w = test::random_tensor(Shape{k, c, 3, 3}, 22, -0.5f, 0.5f), b = test::random_tensor(Shape{k}, 23);
    const Shape ys{n, k, pg.p, pg.q};
    const Tensor dy = test::random_tensor(ys, 24).to_layout(Layout::NHWC);
    std::vector<std::vector<float>> got;
    std::vector<std::vector<uint8_t>> args;
    for (bool wide : {false, true}) {
      Tensor y = Tensor::empty(ys, DType::F32, Device::cpu(), Layout::NHWC);
      Tensor argmax = Tensor::empty(ys, DType::U8, Device::cpu(), Layout::NHWC);
      Tensor scratch, dw = Tensor::empty(w.shape()), db = Tensor::empty(b.shape());
      cpu::conv2d_maxpool_forward(cg, pg, x, w, b, y, &argmax, scratch, wide);
      cpu::conv2d_maxpool_backward(cg, pg, x, y, argmax, dy, dw, db, scratch, wide);
      std::vector<float> v = y.to_vector(), gw = dw.to_vector(), gb = db.to_vector();
      v.insert(v.end(), gw.begin(), gw.end());
      v.insert(v.end(), gb.begin(), gb.end());
      got.push_back(std::move(v));
      args.emplace_back(argmax.data<uint8_t>(), argmax.data<uint8_t>() + argmax.numel());
    }
    ASSERT_EQ(got[0].size(), got[1].size());
    EXPECT_EQ(0, std::memcmp(got[0].data(), got[1].data(), got[0].size() * sizeof(float))) << "k " << k;
    EXPECT_EQ(args[0], args[1]) << "k " << k;
    EXPECT_TRUE(std::any_of(got[0].begin(), got[0].end(), [](float v) { return std::isnan(v); }));
  }
}

TEST(ConvPoolFusion, ANaNInTheKernelStaysANaN) {
  // A fused max must not turn a NaN into 0 (with ReLU: max(relu(a), ...) compares a NaN false
  // both ways), or a diverged first layer would pass on as zeros. (oneDNN's ReLU post-op in the
  // unfused convolution does map NaN to 0; the fused pair is the stricter of the two.)
  const Tensor x = test::random_tensor(Shape{3, 1, 28, 28}, 8, 0.0f, 1.0f);
  Sequential m = reference_first_block(5);
  m.layers()[0]->params()[0].view(4, Shape{1}).fill(std::nanf(""));  // filter 0's centre tap
  for (bool training : {true, false}) {
    const std::vector<float> out = m.forward_layers(x, training, 0, 2).to_vector();  // (3, 32, 13, 13)
    int64_t nan = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      const bool filter0 = (i / (13 * 13)) % 32 == 0;
      nan += std::isnan(out[i]) ? 1 : 0;
      if (!filter0) {
        EXPECT_FALSE(std::isnan(out[i])) << "a NaN in a filter it is not in, at " << i;
      }
    }
    EXPECT_EQ(nan, 3 * 13 * 13) << "every pooled output of filter 0";
  }
}

TEST(ConvPoolFusion, ANaNPixelReachesExactlyTheWindowsThatSeeIt) {
  // One NaN input pixel at (10, 10) of image 1 reaches the 3x3 convolution outputs (8..10, 8..10)
  // of every filter, which the 2x2 pool windows (4..5, 4..5) hold, at different positions inside
  // them: every one of those pooled outputs must be a NaN, and nothing else.
  Tensor x = test::random_tensor(Shape{2, 1, 28, 28}, 9, 0.0f, 1.0f);
  x.f32()[784 + 10 * 28 + 10] = std::nanf("");
  Sequential m = reference_first_block(6);
  const std::vector<float> out = m.forward_layers(x, false, 0, 2).to_vector();  // (2, 32, 13, 13)
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t k = 0; k < 32; ++k)
      for (int64_t p = 0; p < 13; ++p)
        for (int64_t q = 0; q < 13; ++q) {
          const bool sees = n == 1 && p >= 4 && p <= 5 && q >= 4 && q <= 5;
          EXPECT_EQ(std::isnan(out[((n * 32 + k) * 13 + p) * 13 + q]), sees)
              << "image " << n << " filter " << k << " at (" << p << ", " << q << ")";
        }
}

TEST(ConvPoolFusion, OnlyWhereItFits) {
  const auto fuses = [](auto&& add, const Shape& in) {
    Sequential m;
    add(m);
    m.add<Flatten>();
    m.add<Dense>(3);
    m.build(in, 1);
    bool any = false;
    for (size_t i = 0; i < m.layers().size(); ++i) any = any || m.fused_with_next(i);
    return any;
  };
  EXPECT_TRUE(fuses(
      [](Sequential& m) {
        m.add<Conv2D>(4, Size2{3, 3});
        m.add<MaxPool2D>(Size2{2, 2});
      },
      Shape{1, 8, 8}));
  // 4 channels x 3 x 3 = 36 taps: oneDNN's kernels are the faster ones there.
  EXPECT_FALSE(fuses(
      [](Sequential& m) {
        m.add<Conv2D>(4, Size2{3, 3});
        m.add<MaxPool2D>(Size2{2, 2});
      },
      Shape{4, 8, 8}));
  // Overlapping windows (stride 1) and a padded pool (SAME on an odd size) do not tile.
  EXPECT_FALSE(fuses(
      [](Sequential& m) {
        m.add<Conv2D>(4, Size2{3, 3});
        m.add<MaxPool2D>(Size2{2, 2}, Size2{1, 1});
      },
      Shape{1, 8, 8}));
  EXPECT_FALSE(fuses(
      [](Sequential& m) {
        m.add<Conv2D>(4, Size2{3, 3});
        m.add<MaxPool2D>(Size2{2, 2}, std::nullopt, Padding::Same);
      },
      Shape{1, 9, 9}));
  // A pair that is not the first layer needs its input gradient: not fused.
  EXPECT_FALSE(fuses(
      [](Sequential& m) {
        m.add<ReLU>();
        m.add<Conv2D>(4, Size2{3, 3});
        m.add<MaxPool2D>(Size2{2, 2});
      },
      Shape{1, 8, 8}));
  // A subclass may override what the fused pass would skip: only the classes themselves fuse.
  struct MyConv : Conv2D {
    using Conv2D::Conv2D;
  };
  EXPECT_FALSE(fuses(
      [](Sequential& m) {
        m.add<MyConv>(4, Size2{3, 3});
        m.add<MaxPool2D>(Size2{2, 2});
      },
      Shape{1, 8, 8}));
  // Asked for its input gradient after build: the layers run on their own.
  Sequential wants_dx = reference_first_block(1);
  wants_dx.layers()[0]->set_needs_input_grad(true);
  EXPECT_FALSE(wants_dx.fused_with_next(0));
  Sequential off = reference_first_block(1);
  off.set_cpu_fusion(false);
  EXPECT_FALSE(off.fused_with_next(0));
  EXPECT_EQ(off.placement_report(4).find("one pass per image"), std::string::npos);
}

TEST(ConvPoolFusion, RangesRunWhatTheyCoverAndBackwardMustNotSplitAFusedPair) {
  Sequential m = reference_first_block(2);
  const Tensor x = test::random_tensor(Shape{2, 1, 28, 28}, 9, 0.0f, 1.0f);
  const Tensor& pooled = m.forward_layers(x, true, 0, 2);  // the pair, fused
  EXPECT_EQ(pooled.shape(), (Shape{2, 32, 13, 13}));
  const Tensor dy = Tensor::zeros(pooled.shape(), DType::F32, Device::cpu());
  EXPECT_THROW(m.backward_layers(dy, 1, 2), ArgumentError);  // the pool alone: it ran inside the pair
  EXPECT_FALSE(m.backward_layers(dy, 0, 2).defined());       // the first layers: no input gradient
  // A range that ends inside the pair runs the convolution on its own (and its backward works).
  const Tensor& conv_out = m.forward_layers(x, true, 0, 1);
  EXPECT_EQ(conv_out.shape(), (Shape{2, 32, 26, 26}));
  EXPECT_NO_THROW(m.backward_layers(Tensor::zeros(conv_out.shape(), DType::F32, Device::cpu()), 0, 1));
  EXPECT_THROW(m.forward_layers(x, true, 1, 2), ShapeError);  // layer 1 wants (N, 32, 26, 26)
  // After a fused forward, a range starting at the pool runs it on its own: its backward is fine
  // (the pair's earlier fused run does not count).
  const Tensor conv_alone = m.forward_layers(x, true, 0, 1).to_layout(Layout::NHWC);
  m.forward_layers(x, true, 0, 2);
  const Tensor& pooled_alone = m.forward_layers(conv_alone, true, 1, 2);
  EXPECT_NO_THROW(m.backward_layers(Tensor::zeros(pooled_alone.shape(), DType::F32, Device::cpu()), 1, 2));
}

}  // namespace
}  // namespace ember
