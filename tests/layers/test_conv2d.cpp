// Conv2D: forward against a naive NCHW loop; gradients by finite differences; bad shapes.
#include <gtest/gtest.h>

#include "core/cpu/cpu_features.h"
#include "core/runtime.h"
#include "layers/cpu/conv2d.h"
#include "layers/cpu/conv2d_winograd.h"
#include "test_util.h"

namespace ember {
namespace {

// Winograd/direct kernels reorder the float sums; 1e-4 relative is ~100 ulps on sums of <= 100
// products of O(1) terms, far below what a wrong index or a missing bias would give.
constexpr double kForwardTolerance = 1e-4;

std::vector<float> naive_conv(const Tensor& x, const Tensor& w, const Tensor& b, int64_t sh, int64_t sw, int64_t pt,
                              int64_t pl, int64_t p, int64_t q, bool relu) {
  const int64_t n = x.dim(0), c = x.dim(1), h = x.dim(2), wd = x.dim(3), k = w.dim(0), r = w.dim(2), s = w.dim(3);
  std::vector<float> y(static_cast<size_t>(n * k * p * q));
  const float *xp = x.f32(), *wp = w.f32(), *bp = b.f32();
  for (int64_t in = 0; in < n; ++in)
    for (int64_t ik = 0; ik < k; ++ik)
      for (int64_t ip = 0; ip < p; ++ip)
        for (int64_t iq = 0; iq < q; ++iq) {
          double acc = bp[ik];
          for (int64_t ic = 0; ic < c; ++ic)
            for (int64_t ir = 0; ir < r; ++ir)
              for (int64_t is = 0; is < s; ++is) {
                const int64_t ih = ip * sh - pt + ir, iw = iq * sw - pl + is;
                if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                acc += double(xp[((in * c + ic) * h + ih) * wd + iw]) * wp[((ik * c + ic) * r + ir) * s + is];
              }
          if (relu && acc < 0) acc = 0;
          y[static_cast<size_t>(((in * k + ik) * p + ip) * q + iq)] = static_cast<float>(acc);
        }
  return y;
}

struct ConvCase {
  int64_t n, c, h, w, k, r, s;
  Padding padding;
  int64_t stride;
  Activation act;
};

class Conv2DForward : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Conv2DForward, MatchesNaiveLoop) {
  const ConvCase cc = GetParam();
  Conv2D conv(cc.k, {cc.r, cc.s}, cc.act, cc.padding, {cc.stride, cc.stride});
  const Shape out = test::build_standalone(conv, Shape{cc.c, cc.h, cc.w}, 7);
  const Tensor x = test::random_tensor(Shape{cc.n, cc.c, cc.h, cc.w}, 11);
  const Tensor& y = conv.forward(x, false);
  ASSERT_EQ(y.shape(), out.with_batch(cc.n));

  const AxisGeometry gh = axis_geometry(cc.h, cc.r, cc.stride, cc.padding);
  const AxisGeometry gw = axis_geometry(cc.w, cc.s, cc.stride, cc.padding);
  const auto want = naive_conv(x, conv.params()[0], conv.params()[1], cc.stride, cc.stride, gh.pad_before,
                               gw.pad_before, gh.out, gw.out, cc.act == Activation::ReLU);
  EXPECT_LE(test::max_rel_error(y.to_vector(), want), kForwardTolerance);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Conv2DForward,
    ::testing::Values(ConvCase{2, 1, 8, 8, 4, 3, 3, Padding::Valid, 1, Activation::None},    // MNIST-like first layer
                      ConvCase{2, 3, 9, 7, 5, 3, 3, Padding::Valid, 1, Activation::ReLU},    // fused ReLU
                      ConvCase{3, 4, 6, 6, 8, 3, 3, Padding::Same, 1, Activation::ReLU},     // same padding
                      ConvCase{2, 2, 7, 7, 3, 2, 2, Padding::Same, 1, Activation::None},     // even kernel, same
                      ConvCase{2, 3, 9, 9, 4, 3, 3, Padding::Valid, 2, Activation::None},    // stride 2
                      ConvCase{1, 16, 5, 5, 16, 1, 1, Padding::Valid, 1, Activation::None},  // 1x1
                      // Winograd forward on AVX-512 (3x3, stride 1, C and K multiples of 16, >= 64
                      // outputs per image): the reference CNN's conv2d_1, and SAME padding
                      ConvCase{2, 32, 13, 13, 64, 3, 3, Padding::Valid, 1, Activation::ReLU},
                      ConvCase{2, 16, 9, 9, 16, 3, 3, Padding::Same, 1, Activation::None}));

TEST(Conv2D, GradientsValid) {
  Conv2D conv(3, {3, 3}, Activation::None);
  test::build_standalone(conv, Shape{2, 5, 5}, 1);
  test::check_layer_gradients(conv, test::random_tensor(Shape{2, 2, 5, 5}, 2), 3);
}

TEST(Conv2D, GradientsSamePaddingWithRelu) {
  Conv2D conv(4, {3, 3}, Activation::ReLU, Padding::Same);
  test::build_standalone(conv, Shape{3, 4, 4}, 4);
  test::check_layer_gradients(conv, test::random_tensor(Shape{2, 3, 4, 4}, 5), 6);
}

TEST(Conv2D, GradientsOneInputChannel) {  // the weight gradient runs in oneDNN's blocked layout
  Conv2D conv(16, {3, 3}, Activation::ReLU);
  test::build_standalone(conv, Shape{1, 6, 6}, 10);
  test::check_layer_gradients(conv, test::random_tensor(Shape{2, 1, 6, 6}, 11), 12);
}

// Forward and backward-data by Ember's Winograd on AVX-512 (3x3, stride 1, C and K multiples of
// 16, outputs of at least 4x4), the weight gradient by Ember's too. Without ReLU: with 144-term
// sums most weights' finite-difference steps cross some output's kink; the fused ReLU's mask is
// the direct path's (checked above).
TEST(Conv2D, GradientsOfAWinogradShape) {
  Conv2D conv(16, {3, 3}, Activation::None, Padding::Same);
  test::build_standalone(conv, Shape{16, 8, 8}, 13);
  if (ember::cpu_avx512()) {
    const std::string info = conv.kernel_info(1, Device::cpu());
    EXPECT_NE(info.find("fwd ember winograd"), std::string::npos) << info;
    EXPECT_NE(info.find("bwd-data ember winograd"), std::string::npos) << info;
  }
  test::check_layer_gradients(conv, test::random_tensor(Shape{1, 16, 8, 8}, 14), 15);
}

TEST(Conv2D, GradientsStride2) {
  Conv2D conv(2, {3, 3}, Activation::None, Padding::Valid, {2, 2});
  test::build_standalone(conv, Shape{2, 7, 7}, 7);
  test::check_layer_gradients(conv, test::random_tensor(Shape{1, 2, 7, 7}, 8), 9);
}

// use_bias = false (a 1x1 strided projection, as a residual block's shortcut): no bias parameter,
// and outputs and gradients equal a biased layer's whose bias is zero, bit for bit (adding a zero
// bias rounds nothing).
TEST(Conv2D, WithoutBiasHasOnlyAKernelAndEqualsAZeroBias) {
  Conv2D plain(8, {1, 1}, Activation::None, Padding::Valid, {2, 2}, false);
  Conv2D biased(8, {1, 1}, Activation::None, Padding::Valid, {2, 2});
  test::build_standalone(plain, Shape{4, 7, 7}, 3);
  test::build_standalone(biased, Shape{4, 7, 7}, 3);
  ASSERT_EQ(plain.param_specs().size(), 1u);
  EXPECT_EQ(plain.num_params(), 8 * 4);
  Tensor(biased.params()[0]).copy_from(plain.params()[0]);  // views: set the layer's own
  Tensor(biased.params()[1]).fill(0.0f);
  const Tensor x = test::random_tensor(Shape{3, 4, 7, 7}, 4);
  EXPECT_EQ(plain.forward(x, true).to_vector(), biased.forward(x, true).to_vector());
  const Tensor dy = test::random_tensor(Shape{3, 8, 4, 4}, 5);
  EXPECT_EQ(plain.backward(dy).to_vector(), biased.backward(dy).to_vector());
  EXPECT_EQ(plain.grads()[0].to_vector(), biased.grads()[0].to_vector());
  test::check_layer_gradients(plain, x, 6);
}

TEST(Conv2D, AcceptsNhwcInputWithSameResult) {
  Conv2D conv(4, {3, 3}, Activation::ReLU);
  test::build_standalone(conv, Shape{3, 6, 6}, 1);
  const Tensor x = test::random_tensor(Shape{2, 3, 6, 6}, 2);
  const std::vector<float> a = conv.forward(x, false).to_vector();
  const std::vector<float> b = conv.forward(x.to_layout(Layout::NHWC), false).to_vector();
  EXPECT_EQ(a, b);
}

TEST(Conv2D, RejectsBadShapes) {
  Conv2D conv(4, {3, 3});
  EXPECT_THROW(conv.build(Shape{3, 8}), ShapeError);     // not (C, H, W)
  EXPECT_THROW(conv.build(Shape{1, 2, 2}), ShapeError);  // kernel larger than input
  test::build_standalone(conv, Shape{3, 8, 8}, 1);
  EXPECT_THROW(conv.forward(Tensor::zeros(Shape{2, 2, 8, 8}), false), ShapeError);  // wrong channels
  EXPECT_THROW(Conv2D(0, {3, 3}), ArgumentError);
  EXPECT_THROW(Conv2D(4, {0, 3}), ArgumentError);
  try {
    conv.forward(Tensor::zeros(Shape{2, 2, 8, 8}), false);
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("(N, 3, 8, 8)"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// The convolution policy (core/runtime.h): Fast takes Ember's Winograd where it fits, Exact direct
// sums only (oneDNN's direct kernels, Ember's direct weight gradient wherever it fits), and no
// oneDNN primitive is ever its Winograd (it does not keep structural zeros). The plan cache keys
// on the policy, so the same shape plans again after a change.
TEST(ConvAlgorithmsPolicy, ExactTakesDirectSumsOnlyAndFastWinogradWhereItFits) {
  Conv2dShape g;
  g.n = 8, g.c = 32, g.h = g.w = 13, g.k = 64, g.r = g.s = 3, g.p = g.q = 11, g.relu = true;  // conv2d_1
  const auto kernel_under = [&](ConvAlgorithms policy) {
    const test::ConvAlgorithmsScope scope(policy);
    return cpu::conv2d_kernel_info(g);
  };
  const std::string exact = kernel_under(ConvAlgorithms::Exact);
  const std::string fast = kernel_under(ConvAlgorithms::Fast);
  EXPECT_EQ(exact.find("winograd"), std::string::npos) << exact;
  EXPECT_EQ(exact.find("wino"), std::string::npos) << exact;  // oneDNN's names it "jit_wino_..."
  if (cpu::conv2d_winograd_forward_fits(g)) {                 // AVX-512: Ember's kernels run
    EXPECT_NE(exact.find("bwd-weights ember direct"), std::string::npos) << exact;
    EXPECT_NE(fast.find("fwd ember winograd"), std::string::npos) << fast;
  }
  EXPECT_EQ(parse_conv_algorithms("exact"), ConvAlgorithms::Exact);
  EXPECT_EQ(parse_conv_algorithms("fast"), ConvAlgorithms::Fast);
  EXPECT_STREQ(to_string(ConvAlgorithms::Exact), "exact");
  EXPECT_THROW(parse_conv_algorithms("Exact"), ArgumentError);
}

}  // namespace
}  // namespace ember
