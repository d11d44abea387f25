// The fused softmax cross-entropy training kernel (set_fused_loss) against the three
// kernels it replaces, bit for bit, and against the CPU within the parity tests' tolerances. Skips,
// saying why, without a usable GPU; scripts/gpu_check.sh runs it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "gpu_test_util.h"
#include "layers/cpu/softmax_xent.h"
#include "layers/cuda/softmax_xent.h"
#include "layers/loss.h"
#include "layers/metrics.h"

namespace ember {
namespace {

using test::bits;
using test::nan_on_gpu;
using test::rel_error;

const Device kGpu = Device::cuda(0);

class FusedLoss : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no usable GPU: " << cuda_status().reason;
  }
  void TearDown() override { set_fused_loss(false); }
  cuda::Context& ctx() { return cuda::context(0); }
  // 4 f64 sums on the GPU, holding {0.5, 2, 0, 1}: the kernels add to what is there.
  static Tensor sums_on_gpu() {
    Tensor h = Tensor::zeros(Shape{4}, DType::F64, Device::cpu());
    h.data<double>()[0] = 0.5;
    h.data<double>()[1] = 2.0;
    h.data<double>()[3] = 1.0;
    return h.to(kGpu);
  }
  static std::vector<double> doubles(const Tensor& t) {
    const Tensor h = t.to(Device::cpu());
    return std::vector<double>(h.data<double>(), h.data<double>() + h.numel());
  }
};

std::vector<uint64_t> bits(const std::vector<double>& v) {
  std::vector<uint64_t> b(v.size());
  std::memcpy(b.data(), v.data(), v.size() * sizeof(double));
  return b;
}

Tensor labels_for(int64_t n, int64_t k, uint64_t seed) {
  Tensor y = Tensor::empty(Shape{n}, DType::I32);
  for (int64_t i = 0; i < n; ++i) y.data<int32_t>()[i] = static_cast<int32_t>((i * 7 + static_cast<int64_t>(seed)) % k);
  return y;
}

// The fused kernel's order of summation is reduce_add2's (thread t: rows t, t + 256, ...; then
// the same tree), its probabilities the same softmax_row and its gradient the same xent_grad:
// tolerance 0 against the three kernels, for batches below, at and above one block's 256 rows,
// at the 4096-row limit and above it (where the three kernels run: equal by construction).
TEST_F(FusedLoss, EqualsTheThreeKernelsBitForBit) {
  for (int64_t k : {10, 2})
    for (int64_t n : {int64_t{1}, int64_t{17}, int64_t{64}, int64_t{256}, int64_t{257}, cuda::kFusedXentRows,
                      cuda::kFusedXentRows + 1}) {
      SCOPED_TRACE("n " + std::to_string(n) + ", k " + std::to_string(k));
      const Tensor z = test::random_tensor(Shape{n, k}, static_cast<uint64_t>(n * 31 + k), -6.0f, 6.0f);
      const Tensor y = labels_for(n, k, 3);
      const Tensor zg = z.to(kGpu), yg = y.to(kGpu);
      const int64_t mean_rows = 3 * n + 1;  // one slice of a larger batch
      Tensor pu = nan_on_gpu(z.shape()), du = nan_on_gpu(z.shape()), su = sums_on_gpu();
      cuda::softmax_xent_accumulate(ctx(), zg, yg, pu, su);
      cuda::softmax_xent_backward(ctx(), pu, yg, du, mean_rows);
      Tensor pf = nan_on_gpu(z.shape()), df = nan_on_gpu(z.shape()), sf = sums_on_gpu();
      cuda::softmax_xent_accumulate_backward(ctx(), zg, yg, pf, sf, df, mean_rows);
      EXPECT_EQ(bits(pf), bits(pu));
      EXPECT_EQ(bits(df), bits(du));
      const std::vector<double> fused = doubles(sf), three = doubles(su);
      EXPECT_EQ(bits(fused), bits(three));
      // And both against the CPU: expf within 2 ulps of the CPU's, sums in double on both; the
      // gradient rounds p * scale and the subtraction separately on both.
      Tensor p = Tensor::empty(z.shape()), d = Tensor::empty(z.shape());
      Tensor s = Tensor::zeros(Shape{4}, DType::F64);
      cpu::softmax_xent_accumulate(z, y, p, s);
      cpu::softmax_xent_backward(p, y, d, mean_rows);
      EXPECT_LE(rel_error(pf.to_vector(), p.to_vector()), 1e-6);
      EXPECT_LE(rel_error(df.to_vector(), d.to_vector()), 1e-7);
      // Each row's loss is log(sum of expf) - (z_label - z_best): CUDA's expf is within 2 ulps, so
      // the double sum of the exponentials within 2.4e-7 relative and the row's loss within
      // 2.4e-7 absolute; the batch sum within n x 2.4e-7, and these rows' mean loss is >= 0.5
      // (logits in [-6, 6]): 5e-7 of the sum, 2e-6 with margin. A lost row errs by >= 1/4097.
      EXPECT_NEAR(fused[0] - 0.5, s.data<double>()[0], 2e-6 * std::max(1.0, s.data<double>()[0]));
      EXPECT_EQ(fused[1] - 2.0, s.data<double>()[1]);  // exact counts in double
      EXPECT_EQ(fused[2], 0.0);
      EXPECT_EQ(fused[3], 2.0);
    }
}

// A label outside [0, k) sets the bad-label flag and a NaN logit makes the loss sum non-finite
// (the batch is then not counted as finite), the same in both paths.
TEST_F(FusedLoss, BadLabelsAndNonFiniteBatchesAsTheThreeKernels) {
  Tensor z = test::random_tensor(Shape{300, 10}, 41);
  z.f32()[123] = std::numeric_limits<float>::quiet_NaN();
  Tensor y = labels_for(300, 10, 1);
  y.data<int32_t>()[7] = 10;
  y.data<int32_t>()[290] = -1;
  const Tensor zg = z.to(kGpu), yg = y.to(kGpu);
  Tensor pu = nan_on_gpu(z.shape()), du = nan_on_gpu(z.shape()), su = sums_on_gpu();
  cuda::softmax_xent_accumulate(ctx(), zg, yg, pu, su);
  cuda::softmax_xent_backward(ctx(), pu, yg, du, 300);
  Tensor pf = nan_on_gpu(z.shape()), df = nan_on_gpu(z.shape()), sf = sums_on_gpu();
  cuda::softmax_xent_accumulate_backward(ctx(), zg, yg, pf, sf, df, 300);
  EXPECT_EQ(bits(pf), bits(pu));
  EXPECT_EQ(bits(df), bits(du));
  const std::vector<double> fused = doubles(sf);
  EXPECT_EQ(bits(fused), bits(doubles(su)));
  EXPECT_EQ(fused[2], 1.0);           // the bad-label flag
  EXPECT_TRUE(std::isnan(fused[0]));  // row 12's NaN logit
  EXPECT_EQ(fused[3], 1.0);           // not counted as a finite batch
}

// Through the loss object, as a training step calls it: the switch changes nothing but the
// launches.
TEST_F(FusedLoss, TheLossObjectGivesTheSameBitsUnderTheSwitch) {
  const Tensor zg = test::random_tensor(Shape{64, 10}, 5, -4.0f, 4.0f).to(kGpu);
  const Tensor yg = labels_for(64, 10, 2).to(kGpu);
  auto run = [&](bool fused) {
    set_fused_loss(fused);
    SoftmaxCrossEntropy loss;
    MetricSums sums(kGpu);
    const std::vector<uint32_t> d = bits(loss.forward_backward(zg, yg, sums, 200));
    const MetricSums::Values v = sums.read();
    return std::make_tuple(d, bits(loss.probabilities()), v.loss_sum, v.correct, v.finite_batches);
  };
  const auto unfused = run(false), fused = run(true);
  EXPECT_EQ(std::get<0>(fused), std::get<0>(unfused));
  EXPECT_EQ(std::get<1>(fused), std::get<1>(unfused));
  EXPECT_EQ(std::get<2>(fused), std::get<2>(unfused));
  EXPECT_EQ(std::get<3>(fused), std::get<3>(unfused));
  EXPECT_EQ(std::get<4>(fused), std::get<4>(unfused));
  EXPECT_EQ(std::get<4>(fused), 1);
}

}  // namespace
}  // namespace ember
