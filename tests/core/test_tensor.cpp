// Shape and Tensor: views, layouts, typed access, errors; seeded fills and Rng determinism.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "test_util.h"

namespace ember {
namespace {

TEST(Shape, BasicsAndErrors) {
  const Shape s{2, 3, 4};
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.with_batch(5), (Shape{5, 2, 3, 4}));
  EXPECT_EQ(s.without_batch(), (Shape{3, 4}));
  EXPECT_EQ(s.str(), "(2, 3, 4)");
  EXPECT_THROW((Shape{1, -2}), ShapeError);
  EXPECT_THROW((Shape{1, 1, 1, 1, 1, 1, 1}), ShapeError);
}

TEST(Tensor, LayoutRoundTripKeepsLogicalValues) {
  const Tensor x = test::random_tensor(Shape{2, 3, 4, 5}, 1);
  const Tensor nhwc = x.to_layout(Layout::NHWC);
  EXPECT_EQ(nhwc.layout(), Layout::NHWC);
  // Element (n=1, c=2, h=3, w=4) sits at ((1*4+3)*5+4)*3+2 in NHWC.
  EXPECT_EQ(nhwc.f32()[((1 * 4 + 3) * 5 + 4) * 3 + 2], x.f32()[((1 * 3 + 2) * 4 + 3) * 5 + 4]);
  EXPECT_EQ(nhwc.to_vector(), x.to_vector());
  EXPECT_EQ(nhwc.to_layout(Layout::RowMajor).to_vector(), x.to_vector());
}

TEST(Tensor, SingleChannelLayoutsAliasWithoutCopy) {
  const Tensor x = test::random_tensor(Shape{2, 1, 3, 3}, 2);
  Tensor scratch;
  const Tensor& y = as_layout(x, Layout::NHWC, scratch);
  EXPECT_EQ(y.layout(), Layout::NHWC);
  EXPECT_EQ(y.raw(), x.raw());
  EXPECT_THROW(test::random_tensor(Shape{1, 2, 2, 2}, 1).relabel(Layout::NHWC), ShapeError);
}

TEST(Tensor, ViewsShareStorageAndAreBoundsChecked) {
  Tensor flat = Tensor::zeros(Shape{10});
  Tensor v = flat.view(4, Shape{2, 3});
  v.fill(1.5f);
  EXPECT_EQ(flat.f32()[3], 0.0f);
  EXPECT_EQ(flat.f32()[4], 1.5f);
  EXPECT_EQ(flat.f32()[9], 1.5f);
  EXPECT_THROW(flat.view(5, Shape{2, 3}), ShapeError);
  EXPECT_THROW(flat.view(-1, Shape{2}), ShapeError);
  EXPECT_THROW(flat.reshape(Shape{3, 3}), ShapeError);
}

// rows(begin, count): the batch rows of a (N, ...) tensor as a view of shape (count, ...).
TEST(Tensor, RowsAreAViewOfWholeSamples) {
  Tensor batch = Tensor::zeros(Shape{4, 2, 3});
  Tensor r = batch.rows(1, 2);
  EXPECT_EQ(r.shape(), (Shape{2, 2, 3}));
  r.fill(2.0f);
  const std::vector<float> v = batch.to_vector();
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(v[i], i >= 6 && i < 18 ? 2.0f : 0.0f) << i;
  EXPECT_EQ(batch.rows(4, 0).shape(), (Shape{0, 2, 3}));  // an empty tail
  EXPECT_THROW(batch.rows(3, 2), ShapeError);
  EXPECT_THROW(batch.rows(-1, 1), ShapeError);
  EXPECT_THROW(batch.rows(0, -1), ShapeError);
}

TEST(Tensor, FillWritesF32AndF64AndRefusesOtherDtypes) {
  Tensor sums = Tensor::zeros(Shape{3}, DType::F64);  // MetricSums' buffer type
  sums.fill(std::numeric_limits<float>::quiet_NaN());
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(std::isnan(sums.data<double>()[i]));
  sums.fill(0.1f);  // the float's value, widened (not 0.1 as a double)
  EXPECT_EQ(sums.data<double>()[2], static_cast<double>(0.1f));
  Tensor counts = Tensor::zeros(Shape{2}, DType::I32);
  EXPECT_THROW(counts.fill(1.0f), ArgumentError);  // as on a GPU
  EXPECT_EQ(counts.data<int32_t>()[0], 0);
}

TEST(Runtime, KernelSettingsVersionCountsRealChangesOnly) {
  const bool tf32 = allow_tf32();
  const ConvAlgorithms policy = conv_algorithms();
  const uint64_t v0 = kernel_settings_version();
  set_allow_tf32(tf32);  // the value it has: no change
  set_conv_algorithms(policy);
  EXPECT_EQ(kernel_settings_version(), v0);
  set_allow_tf32(!tf32);
  EXPECT_EQ(kernel_settings_version(), v0 + 1);
  set_allow_tf32(tf32);
  EXPECT_EQ(kernel_settings_version(), v0 + 2);  // back again is a change too (a plan made between is stale)
  const std::pair<void (*)(bool), bool (*)()> switches[] = {{set_gpu_deterministic, gpu_deterministic},
                                                            {set_cudnn_find, cudnn_find},
                                                            {set_fused_conv, fused_conv},
                                                            {set_gpu_nhwc, gpu_nhwc},
                                                            {set_fused_dense, fused_dense},
                                                            {set_fused_loss, fused_loss},
                                                            {set_fused_advance, fused_advance}};
  for (const auto& [set, get] : switches) {
    const uint64_t before = kernel_settings_version();
    const bool was = get();
    set(!was);
    set(was);
    EXPECT_EQ(kernel_settings_version(), before + 2);
  }
  const uint64_t before = kernel_settings_version();
  set_conv_algorithms(policy == ConvAlgorithms::Fast ? ConvAlgorithms::Exact : ConvAlgorithms::Fast);
  set_conv_algorithms(policy);
  EXPECT_EQ(kernel_settings_version(), before + 2);
}

TEST(Tensor, TypedAccessChecksTheDtype) {
  Tensor labels = Tensor::zeros(Shape{4}, DType::I32);
  EXPECT_NO_THROW(labels.data<int32_t>());
  EXPECT_THROW(labels.f32(), ShapeError);
  EXPECT_THROW(Tensor().f32(), Error);
  EXPECT_THROW(Tensor::from_vector(Shape{3}, std::vector<float>{1, 2}), ShapeError);
}

TEST(Tensor, SeededUniformAndNormal) {
  const Tensor a = Tensor::uniform(Shape{1000}, -2.0f, 3.0f, 7), b = Tensor::uniform(Shape{1000}, -2.0f, 3.0f, 7);
  EXPECT_EQ(a.to_vector(), b.to_vector());  // same seed, same values
  EXPECT_NE(a.to_vector(), Tensor::uniform(Shape{1000}, -2.0f, 3.0f, 8).to_vector());
  double mean = 0;
  for (float v : a.to_vector()) {
    EXPECT_GE(v, -2.0f);
    EXPECT_LT(v, 3.0f);
    mean += v / 1000.0;
  }
  EXPECT_NEAR(mean, 0.5, 0.15);  // 5 sigma of a uniform mean over 1000 draws (sd 1.44 / sqrt(1000))
  const std::vector<float> n = Tensor::normal(Shape{4000}, 1.0f, 2.0f, 3).to_vector();
  double m = 0, sq = 0;
  for (float v : n) m += v / 4000.0;
  for (float v : n) sq += (v - m) * (v - m) / 4000.0;
  EXPECT_NEAR(m, 1.0, 0.16);              // 5 sigma: 5 * 2 / sqrt(4000)
  EXPECT_NEAR(std::sqrt(sq), 2.0, 0.12);  // ~5 sigma of the sample sd (2 / sqrt(2 * 4000) each)
  EXPECT_THROW(Tensor::uniform(Shape{2}, 1.0f, 1.0f, 1), ArgumentError);
  EXPECT_THROW(Tensor::normal(Shape{2}, 0.0f, -1.0f, 1), ArgumentError);
}

TEST(Rng, SameSeedSameStreamDifferentForks) {
  Rng a(42), b(42);
  for (int i = 0; i < 100; ++i) ASSERT_EQ(a.next_u64(), b.next_u64());
  Rng c(42);
  EXPECT_NE(c.fork(1).next_u64(), c.fork(2).next_u64());
  Rng d(7);
  for (int i = 0; i < 1000; ++i) {
    const float u = d.uniform();
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    ASSERT_LT(d.below(10), 10u);
  }
}

}  // namespace
}  // namespace ember
