// The losses, metrics, the any-kind gather, clipping, decay and RMSprop on the GPU against their
// CPU twins.
// Both run the same formulas (layers/losses_math.h); the GPU's expf and its fused multiply-adds
// may round differently, so values agree to a few float ulps, counts exactly. Skips without a GPU
// (scripts/gpu_check.sh runs it on one).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/runtime.h"
#include "data/cuda/gather.h"
#include "data/dataset.h"
#include "layers/loss.h"
#include "layers/metrics.h"
#include "optim/optim.h"
#include "test_util.h"

namespace ember {
namespace {

const Device kGpu = Device::cuda(0);
constexpr double kUlp1 = std::numeric_limits<float>::epsilon();

class LossParity : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no usable GPU: " << cuda_status().reason;
  }
};

TEST_F(LossParity, EveryLossOnTheGpuMatchesItsCpuTwin) {
  std::vector<std::pair<std::string, std::function<std::unique_ptr<Loss>()>>> cases = {
      {"mse", [] { return std::make_unique<losses::MeanSquaredError>(); }},
      {"mae", [] { return std::make_unique<losses::MeanAbsoluteError>(); }},
      {"huber", [] { return std::make_unique<losses::Huber>(0.7f); }},
      {"bce", [] { return std::make_unique<losses::BinaryCrossentropy>(true, 0.1f); }},
      {"bce_probabilities", [] { return std::make_unique<losses::BinaryCrossentropy>(false); }},
      {"cce", [] { return std::make_unique<losses::CategoricalCrossentropy>(0.1f); }},
  };
  // 300 rows: more than one block of 256 threads per row-kernel.
  for (const auto& [name, make] : cases) {
    const bool probs = name == "bce_probabilities";
    const Tensor z = probs ? test::random_tensor(Shape{300, 10}, 1, 0.02f, 0.98f)
                           : test::random_tensor(Shape{300, 10}, 1, -4.0f, 4.0f);
    const Tensor t = test::random_tensor(Shape{300, 10}, 2, 0.0f, 1.0f);
    auto cl = make(), gl = make();
    MetricSums cs(Device::cpu()), gs(kGpu);
    cl->forward(z, t, cs);
    gl->forward(z.to(kGpu), t.to(kGpu), gs);
    const MetricSums::Values c = cs.read(), g = gs.read();
    // Row values in double from the same floats: the point losses differ only by the device's
    // double exp/log (a few ulps) and the sum's order, ~1e-15 relative: 1e-12. CCE takes its
    // softmax from float exps (CUDA's expf within 2 ulps of glibc's): log(sum) moves by at most
    // 2 float ulps (2.4e-7) per row, times the row's target mass (1): 2.4e-7 x 300 rows.
    const double bound = name == "cce" ? 2 * kUlp1 * 300 : 1e-12 * c.loss_sum;
    EXPECT_NEAR(g.loss_sum, c.loss_sum, bound) << name;
    EXPECT_EQ(g.finite_batches, 1) << name;
    const int64_t mean_rows = 512;
    const double scale = name == "cce" ? 1.0 / mean_rows : 1.0 / (10.0 * mean_rows);
    // A handful of float operations per element (a sigmoid, a softmax's division): 8 ulps of
    // the element's O(1) factor, times the mean's scale.
    EXPECT_LE(test::max_rel_error(gl->backward(mean_rows).to_vector(), cl->backward(mean_rows).to_vector(), scale),
              8 * kUlp1)
        << name;
  }
}

TEST_F(LossParity, EveryMetricOnTheGpuCountsWhatTheCpuCounts) {
  const Tensor z = test::random_tensor(Shape{300, 10}, 3, -3.0f, 3.0f);
  Tensor labels = Tensor::empty(Shape{300}, DType::I32);
  for (int64_t i = 0; i < 300; ++i) labels.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % 10);
  Tensor onehot = Tensor::zeros(Shape{300, 10}, DType::F32, Device::cpu());
  Tensor bits = Tensor::zeros(Shape{300, 10}, DType::F32, Device::cpu());
  for (int64_t i = 0; i < 300; ++i) {
    onehot.f32()[i * 10 + labels.data<int32_t>()[i]] = 1.0f;
    for (int64_t j = 0; j < 10; ++j) bits.f32()[i * 10 + j] = ((i + j) % 3 == 0) ? 1.0f : 0.0f;
  }
  const MetricList sparse = {std::make_shared<metrics::SparseCategoricalAccuracy>(),
                             std::make_shared<metrics::SparseTopKCategoricalAccuracy>(3)};
  const MetricList dense = {std::make_shared<metrics::CategoricalAccuracy>(),
                            std::make_shared<metrics::MeanAbsoluteError>(),
                            std::make_shared<metrics::MeanSquaredError>()};
  MetricSums cs(Device::cpu(), 6), gs(kGpu, 6);
  for (size_t i = 0; i < sparse.size(); ++i) {
    sparse[i]->accumulate(z, labels, cs, 4 + static_cast<int64_t>(i));
    sparse[i]->accumulate(z.to(kGpu), labels.to(kGpu), gs, 4 + static_cast<int64_t>(i));
  }
  for (size_t i = 0; i < dense.size(); ++i) {
    dense[i]->accumulate(z, onehot, cs, 6 + static_cast<int64_t>(i));
    dense[i]->accumulate(z.to(kGpu), onehot.to(kGpu), gs, 6 + static_cast<int64_t>(i));
  }
  metrics::BinaryAccuracy().accumulate(z, bits, cs, 9);
  metrics::BinaryAccuracy().accumulate(z.to(kGpu), bits.to(kGpu), gs, 9);
  const std::vector<double> c = cs.read().metrics, g = gs.read().metrics;
  for (int k : {0, 1, 2, 5}) EXPECT_EQ(g[k], c[k]) << "count " << k;  // counts and tenths: exact
  EXPECT_GT(c[0], 0);
  // MAE and MSE: double sums of exact float differences; only the order of 300 adds differs:
  // at most 300 x 2^-53 (3.3e-14) of the sum.
  EXPECT_NEAR(g[3], c[3], 1e-13 * c[3]);
  EXPECT_NEAR(g[4], c[4], 1e-13 * c[4]);
}

TEST_F(LossParity, GatherOfFloatFeaturesAndWideFloatTargetsEqualsTheCpu) {
  // An autoencoder's shape of data: f32 features (scaled by 0.5) and targets wider than them.
  const int64_t n = 40;
  const Tensor f = test::random_tensor(Shape{n, 3}, 4), t = test::random_tensor(Shape{n, 7}, 5);
  const Dataset ds = Dataset::from_tensors(f, t, {.scale = 0.5f});
  const std::vector<int64_t> order = {39, 0, 7, 7, 23, 1};
  Tensor xc, yc;
  ds.gather(std::span<const int64_t>(order.data(), 4), xc, yc);
  Tensor og = Tensor::empty(Shape{static_cast<int64_t>(order.size()) + 1}, DType::I32);
  for (size_t i = 0; i < order.size(); ++i) og.data<int32_t>()[i] = static_cast<int32_t>(order[i]);
  og.data<int32_t>()[order.size()] = 0;  // the cursor
  Tensor xg = Tensor::zeros(Shape{4, 3}, DType::F32, kGpu), yg = Tensor::zeros(Shape{4, 7}, DType::F32, kGpu);
  Tensor order_g = og.to(kGpu);
  cuda::gather_batch(cuda::context(0), ds.features().to(kGpu), ds.targets().to(kGpu), ds.scale(), order_g, 0, 4, 4, xg,
                     yg);
  EXPECT_EQ(xg.to_vector(), xc.to_vector());
  EXPECT_EQ(yg.to_vector(), yc.to_vector());
}

TEST_F(LossParity, ClippingDecayAndRmspropOnTheGpuMatchTheCpu) {
  // Three steps of each optimizer on both devices from the same parameters and gradients; the
  // gradients' norm (~18) is above the clip (1), so the clip factor runs every step.
  const Tensor p0 = test::random_tensor(Shape{1000}, 5), mask = test::random_tensor(Shape{1000}, 6, 0.0f, 1.0f);
  Tensor binary = Tensor::empty(Shape{1000}, DType::F32, Device::cpu());
  for (int64_t i = 0; i < 1000; ++i) binary.f32()[i] = mask.f32()[i] > 0.5f ? 1.0f : 0.0f;
  const auto run = [&](Optimizer& opt, Device d) {
    Tensor p = p0.to(d);
    opt.set_decay_mask(binary.to(d));
    for (uint64_t k = 0; k < 3; ++k) {
      Tensor g = test::random_tensor(Shape{1000}, 10 + k, -1.0f, 1.0f).to(d);
      opt.step(p, g);
    }
    return p.to_vector();
  };
  SGD cs(SGDOptions{
      .learning_rate = 0.1f, .momentum = 0.9f, .weight_decay = 0.05f, .global_clipnorm = 1.0f, .clipvalue = 0.8f});
  SGD gs(SGDOptions{
      .learning_rate = 0.1f, .momentum = 0.9f, .weight_decay = 0.05f, .global_clipnorm = 1.0f, .clipvalue = 0.8f});
  // The norm in double either way, grouped otherwise: the clip factor agrees to ~1 float ulp.
  EXPECT_LE(test::max_rel_error(run(gs, kGpu), run(cs, Device::cpu())), 4 * kUlp1);
  RMSprop cr(RmspropOptions{.learning_rate = 1e-2f, .weight_decay = 0.01f}),
      gr(RmspropOptions{.learning_rate = 1e-2f, .weight_decay = 0.01f});
  EXPECT_LE(test::max_rel_error(run(gr, kGpu), run(cr, Device::cpu())), 4 * kUlp1);
}

}  // namespace
}  // namespace ember
