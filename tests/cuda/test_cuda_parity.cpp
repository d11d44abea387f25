// CPU-vs-GPU parity of every GPU op, forward and backward, on seeded random inputs. Outputs are
// pre-filled with NaN on the device, so an op that writes nothing fails. Skips, saying why,
// without a usable GPU; scripts/gpu_check.sh runs it on a machine with one.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "core/cuda/elementwise.h"
#include "data/cuda/gather.h"
#include "data/dataset.h"
#include "gpu_test_util.h"
#include "layers/activation.h"
#include "layers/cpu/attention.h"
#include "layers/cpu/avgpool2d.h"
#include "layers/cpu/batchnorm.h"
#include "layers/cpu/conv2d.h"
#include "layers/cpu/dense.h"
#include "layers/cpu/dropout.h"
#include "layers/cpu/embedding.h"
#include "layers/cpu/layernorm.h"
#include "layers/cpu/maxpool2d.h"
#include "layers/cpu/pointwise.h"
#include "layers/cpu/relu.h"
#include "layers/cpu/softmax.h"
#include "layers/cpu/softmax_xent.h"
#include "layers/cuda/attention.h"
#include "layers/cuda/avgpool2d.h"
#include "layers/cuda/batchnorm.h"
#include "layers/cuda/conv2d.h"
#include "layers/cuda/dense.h"
#include "layers/cuda/dropout.h"
#include "layers/cuda/embedding.h"
#include "layers/cuda/layernorm.h"
#include "layers/cuda/maxpool2d.h"
#include "layers/cuda/pointwise.h"
#include "layers/cuda/relu.h"
#include "layers/cuda/softmax.h"
#include "layers/cuda/softmax_xent.h"
#include "layers/loss.h"
#include "layers/random_bits.h"
#include "optim/adam.h"
#include "optim/cpu/adam.h"
#include "optim/cuda/adam.h"
#include "optim/cuda/sgd.h"
#include "optim/sgd.h"
#include "test_util.h"

namespace ember {
namespace {

// The op state's plan slot for the direct calls below: one for the whole file, so that it also
// meets other shapes and ops (it finds each plan again through the cache).
detail::GpuPlanSlot& plan_slot() {
  static detail::GpuPlanSlot slot;
  return slot;
}

const Device kGpu = Device::cuda(0);

class Parity : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no usable GPU: " << cuda_status().reason;
    set_allow_tf32(false);  // parity with the CPU is checked in FP32 (TF32 is on by default)
  }
  cuda::Context& ctx() { return cuda::context(0); }
  // A device tensor full of NaN: whatever the op does not write stays NaN.
  static Tensor nan_on_gpu(const Shape& s, Layout layout = Layout::RowMajor) {
    Tensor t = Tensor::empty(s, DType::F32, Device::cpu(), layout);
    t.fill(std::numeric_limits<float>::quiet_NaN());
    return t.to(kGpu);
  }
  static Tensor labels(std::vector<int32_t> v) {
    Tensor t = Tensor::empty(Shape{static_cast<int64_t>(v.size())}, DType::I32);
    std::copy(v.begin(), v.end(), t.data<int32_t>());
    return t;
  }
  // A layer test::build_standalone built on the CPU, moved to the GPU as Sequential::to moves a
  // model's: its parameters and state copied there (bind, then bind_state), its gradients NaN
  // there (every backward must write them all).
  static void move_to_gpu(Layer& layer) {
    std::vector<Tensor> params, grads, state;
    for (const Tensor& p : layer.params()) {
      params.push_back(p.to(kGpu));
      grads.push_back(nan_on_gpu(p.shape()));
    }
    for (const Tensor& s : layer.state()) state.push_back(s.to(kGpu));
    layer.bind(std::move(params), std::move(grads));
    layer.bind_state(std::move(state));
  }
};

// Max |a - b| / max(floor, |b|): relative above `floor`, absolute below; NaN anywhere counts as
// infinite. The default floor 1 suits O(1) values; probabilities need a smaller one.
double rel_error(const std::vector<float>& a, const std::vector<float>& b, double floor = 1.0) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::max(floor, std::abs(double(b[i]))));
  }
  return worst;
}

// A u8 tensor's values in row-major logical order, from either device and any layout.
std::vector<uint8_t> bytes_of(const Tensor& t) {
  Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
  if (h.layout() != Layout::RowMajor) h = h.to_layout(Layout::RowMajor);
  return std::vector<uint8_t>(h.data<uint8_t>(), h.data<uint8_t>() + h.numel());
}

// One ulp at 1: the unit of the elementwise tolerances below (their values are O(1)).
constexpr double kUlp1 = std::numeric_limits<float>::epsilon();

TEST_F(Parity, ReluForwardAndBackwardAreExact) {
  Tensor x = test::random_tensor(Shape{3, 5, 7, 9}, 1);
  x.f32()[0] = 0.0f;  // the kink itself
  Tensor y = Tensor::empty(x.shape()), dx = Tensor::empty(x.shape());
  const Tensor dy = test::random_tensor(x.shape(), 2);
  cpu::relu_forward(x, y);
  cpu::relu_backward(y, dy, dx);
  Tensor yg = nan_on_gpu(x.shape()), dxg = nan_on_gpu(x.shape());
  cuda::relu_forward(ctx(), x.to(kGpu), yg);
  cuda::relu_backward(ctx(), yg, dy.to(kGpu), dxg);
  ctx().synchronize();
  EXPECT_EQ(yg.to_vector(), y.to_vector());  // a select: bit-exact
  EXPECT_EQ(dxg.to_vector(), dx.to_vector());
}

TEST_F(Parity, AdamMatchesTheCpuLoop) {
  // The whole optimizer: on the GPU its step count and step size live on the device (advanced
  // there, uploaded again after a restored count), on the CPU on the host.
  const int64_t n = 100003;  // not a multiple of any block size
  Tensor p = test::random_tensor(Shape{n}, 3), pg = p.to(kGpu);
  Adam cpu_adam, gpu_adam;
  for (int step = 1; step <= 4; ++step) {
    if (step == 3) {  // as a resumed checkpoint does
      cpu_adam.set_iterations(1000);
      gpu_adam.set_iterations(1000);
    }
    const Tensor g = test::random_tensor(Shape{n}, 10 + static_cast<uint64_t>(step));
    cpu_adam.step(p, g);
    gpu_adam.step(pg, g.to(kGpu));
  }
  EXPECT_EQ(gpu_adam.iterations(), 1002);
  ctx().synchronize();
  // The GPU may contract a*b+c into one FMA where the CPU rounds twice: ~1 ulp per operation,
  // a few ulps of O(1) values after four steps (the step sizes agree to the last bit or one).
  EXPECT_LE(rel_error(pg.to_vector(), p.to_vector()), 1e-6);
  for (const char* name : {"m", "v"}) {
    Tensor a, b;
    for (const auto& [k, t] : cpu_adam.state())
      if (k == name) a = t;
    for (const auto& [k, t] : gpu_adam.state())
      if (k == name) b = t;
    EXPECT_LE(rel_error(b.to_vector(), a.to_vector()), 1e-6) << name;
  }
}

TEST_F(Parity, SoftmaxCrossEntropyAndAccuracy) {
  const Tensor z = test::random_tensor(Shape{67, 10}, 4, -4.0f, 4.0f);
  std::vector<int32_t> lv;
  for (int i = 0; i < 67; ++i) lv.push_back((i * 7) % 10);
  const Tensor y = labels(lv);
  Tensor p = Tensor::empty(z.shape()), d = Tensor::empty(z.shape());
  const float loss = cpu::softmax_xent_forward(z, y, p);
  cpu::softmax_xent_backward(p, y, d, 201);  // as one slice of a batch of 201
  const Tensor zg = z.to(kGpu), yg = y.to(kGpu);
  Tensor pg = nan_on_gpu(z.shape()), dg = nan_on_gpu(z.shape());
  const float loss_g = cuda::softmax_xent_forward(ctx(), zg, yg, pg);
  cuda::softmax_xent_backward(ctx(), pg, yg, dg, 201);
  ctx().synchronize();
  // expf on the GPU is within 2 ulps of the CPU's; sums run in double on both.
  EXPECT_NEAR(loss_g, loss, 1e-5 * std::max(1.0f, loss));
  EXPECT_LE(rel_error(pg.to_vector(), p.to_vector()), 1e-6);
  EXPECT_LE(rel_error(dg.to_vector(), d.to_vector()), 1e-7);
  EXPECT_EQ(cuda::count_correct(ctx(), zg, yg), cpu::count_correct(z, y));
  std::vector<int32_t> bad = lv;
  bad[5] = 10;
  EXPECT_THROW(cuda::softmax_xent_forward(ctx(), zg, labels(bad).to(kGpu), pg), ArgumentError);
}

// More rows than the capped grid has threads (4096 blocks x 256 = 2^20): every row is still
// computed (the kernels stride over the grid), none left as the allocator's old contents.
TEST_F(Parity, SoftmaxCrossEntropyCoversRowsBeyondTheGrid) {
  const int64_t n = (int64_t{1} << 20) + 37;
  const Tensor z = test::random_tensor(Shape{n, 2}, 5, -3.0f, 3.0f);
  std::vector<int32_t> lv(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) lv[static_cast<size_t>(i)] = static_cast<int32_t>((i * 31) % 2);
  const Tensor y = labels(lv);
  Tensor p = Tensor::empty(z.shape());
  const float loss = cpu::softmax_xent_forward(z, y, p);
  const Tensor zg = z.to(kGpu), yg = y.to(kGpu);
  Tensor pg = nan_on_gpu(z.shape());
  const float loss_g = cuda::softmax_xent_forward(ctx(), zg, yg, pg);
  EXPECT_NEAR(loss_g, loss, 1e-5 * std::max(1.0f, loss));
  EXPECT_LE(rel_error(pg.to_vector(), p.to_vector()), 1e-6);  // the last rows too (NaN otherwise)
  EXPECT_EQ(cuda::count_correct(ctx(), zg, yg), cpu::count_correct(z, y));
}

TEST_F(Parity, AccumulatedLossAndAccuracyMatchTheCpu) {
  // The training step's device-side sums (no host sync) against the CPU's over three batches,
  // one of them a smaller last batch; NaN-prefilled probabilities must all be written.
  MetricSums cs, gs(kGpu);
  gs.buffer().fill(std::numeric_limits<float>::quiet_NaN());
  gs.reset();  // reset must clear whatever was there
  SoftmaxCrossEntropy cl, gl;
  for (int64_t n : {64, 64, 17}) {
    const Tensor z = test::random_tensor(Shape{n, 10}, static_cast<uint64_t>(20 + n), -4.0f, 4.0f);
    std::vector<int32_t> lv;
    for (int64_t i = 0; i < n; ++i) lv.push_back(static_cast<int32_t>((i * 3 + n) % 10));
    const Tensor y = labels(lv);
    cl.forward(z, y, cs);
    gl.forward(z.to(kGpu), y.to(kGpu), gs);
    EXPECT_LE(rel_error(gl.probabilities().to_vector(), cl.probabilities().to_vector()), 1e-6);
  }
  const MetricSums::Values c = cs.read(), g = gs.read();
  EXPECT_NEAR(g.loss_sum, c.loss_sum, 1e-5 * c.loss_sum);  // double sums of float row losses
  EXPECT_EQ(g.correct, c.correct);
  EXPECT_GT(c.correct, 0);  // a sum that stayed 0 would not be tested by the line above
  EXPECT_EQ(g.finite_batches, 3);
  EXPECT_EQ(c.finite_batches, 3);
  // Two NaN batches: both count the 3 finite batches before the first; the second adds none.
  Tensor nan_logits = test::random_tensor(Shape{4, 10}, 31);
  nan_logits.f32()[7] = std::numeric_limits<float>::quiet_NaN();
  for (const Tensor* z : {&nan_logits, &nan_logits}) {
    cl.forward(*z, labels({1, 2, 3, 4}), cs);
    gl.forward(z->to(kGpu), labels({1, 2, 3, 4}).to(kGpu), gs);
  }
  const MetricSums::Values cn = cs.read(), gn = gs.read();
  EXPECT_FALSE(cn.finite());
  EXPECT_FALSE(gn.finite());
  EXPECT_EQ(cn.finite_batches, 3);
  EXPECT_EQ(gn.finite_batches, 3);
  gs.reset();
  cs.reset();
  // A bad label is reported at the next read, and reset clears it.
  std::vector<int32_t> bad(5, 1);
  bad[2] = 10;
  gl.forward(test::random_tensor(Shape{5, 10}, 9).to(kGpu), labels(bad).to(kGpu), gs);
  EXPECT_THROW(gs.read(), ArgumentError);
  gs.reset();
  EXPECT_EQ(gs.read().correct, 0);
}

// A sequence's loss (logits (N, T, K), labels (N, T)) through the loss object on both backends,
// the fused single-block kernel (set_fused_loss) and the three-kernel path: each sample's loss is
// its steps' mean (the sum divided by T once per batch, in double), the correct count per step,
// the gradient (p - onehot) / (N T). The same tolerances as the flat case above.
TEST_F(Parity, ASequencesLossAndGradientMatchTheCpu) {
  const Tensor z = test::random_tensor(Shape{6, 9, 11}, 41, -3.0f, 3.0f);
  Tensor y = Tensor::empty(Shape{6, 9}, DType::I32);
  for (int64_t i = 0; i < 54; ++i) y.data<int32_t>()[i] = static_cast<int32_t>((i * 7 + 2) % 11);
  const test::GpuSettingsScope settings;  // restored however the test ends
  for (const bool fused : {false, true}) {
    set_fused_loss(fused);
    losses::SparseCategoricalCrossentropy cl, gl;
    MetricSums cs, gs(kGpu);
    const std::vector<float> dc = cl.forward_backward(z, y, cs, 12).to_vector();
    const std::vector<float> dg = gl.forward_backward(z.to(kGpu), y.to(kGpu), gs, 12).to_vector();
    EXPECT_LE(rel_error(dg, dc, 1e-3), 1e-6) << "fused " << fused;
    const MetricSums::Values c = cs.read(), g = gs.read();
    // Each row's loss is log(sum) - (z_label - z_max) in double from float exponentials that differ
    // by <= 2 ulp (expf on the GPU): ~2.4e-7 relative per row, and so for the sum of 54 positive
    // rows; 1e-5 is the flat case's bound above, 40x that, far below a wrong divisor (1/9).
    EXPECT_NEAR(g.loss_sum, c.loss_sum, 1e-5 * c.loss_sum) << "fused " << fused;
    EXPECT_EQ(g.correct, c.correct) << "fused " << fused;
  }
}

TEST_F(Parity, SgdMatchesTheCpuLoop) {
  const int64_t n = 70001;
  for (bool nesterov : {false, true}) {
    SGD cpu_opt({.learning_rate = 0.05f, .momentum = 0.9f, .nesterov = nesterov});
    SGD gpu_opt({.learning_rate = 0.05f, .momentum = 0.9f, .nesterov = nesterov});
    Tensor p = test::random_tensor(Shape{n}, 30);
    Tensor pg = p.to(kGpu);
    for (int step = 0; step < 3; ++step) {
      const Tensor g = test::random_tensor(Shape{n}, 31 + static_cast<uint64_t>(step));
      cpu_opt.step(p, g);
      gpu_opt.step(pg, g.to(kGpu));
    }
    // FMA contraction on the GPU: an ulp or two per operation on O(1) values.
    EXPECT_LE(rel_error(pg.to_vector(), p.to_vector()), 1e-6) << "nesterov " << nesterov;
    EXPECT_LE(rel_error(gpu_opt.state()[0].second.to_vector(), cpu_opt.state()[0].second.to_vector()), 1e-6);
  }
}

TEST_F(Parity, FillAndScaleOnTheDevice) {
  Tensor t = nan_on_gpu(Shape{1001});
  t.fill(2.5f);
  cuda::scale(ctx(), static_cast<float*>(t.raw()), t.numel(), -0.5f);
  ctx().synchronize();
  EXPECT_EQ(t.to_vector(), std::vector<float>(1001, -1.25f));  // exact in binary
}

TEST_F(Parity, GatherFromADeviceDatasetEqualsTheCpuGather) {
  const int64_t n = 50;
  Tensor images = Tensor::empty(Shape{n, 1, 5, 3}, DType::U8), lab = Tensor::empty(Shape{n}, DType::I32);
  for (int64_t i = 0; i < images.numel(); ++i) images.data<uint8_t>()[i] = static_cast<uint8_t>((i * 37) % 256);
  for (int64_t i = 0; i < n; ++i) lab.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
  const Dataset ds(images, lab, 10);
  const std::vector<int64_t> order = {49, 0, 7, 7, 23, 1, 48, 12};
  Tensor xc, yc;
  ds.gather(std::span<const int64_t>(order.data() + 2, 5), xc, yc);  // rows 2..6 of the order
  // The order as the loader keeps it on the device: the indices, then the cursor (here 1).
  Tensor og = Tensor::empty(Shape{static_cast<int64_t>(order.size()) + 1}, DType::I32);
  for (size_t i = 0; i < order.size(); ++i) og.data<int32_t>()[i] = static_cast<int32_t>(order[i]);
  og.data<int32_t>()[order.size()] = 1;
  Tensor xg = nan_on_gpu(Shape{5, 1, 5, 3});
  Tensor yg = Tensor::zeros(Shape{5}, DType::I32, kGpu);
  Tensor order_g = og.to(kGpu);
  // cursor 1 + shard offset 1 = rows 2..6; the cursor then advances by 3.
  cuda::gather_batch(ctx(), images.to(kGpu), lab.to(kGpu), ds.scale(), order_g, 1, 5, 3, xg, yg);
  ctx().synchronize();
  EXPECT_EQ(xg.to_vector(), xc.to_vector());  // the same float product: bit-exact
  const Tensor yh = yg.to(Device::cpu());
  EXPECT_TRUE(std::equal(yh.data<int32_t>(), yh.data<int32_t>() + 5, yc.data<int32_t>()));
  EXPECT_EQ(order_g.to(Device::cpu()).data<int32_t>()[order.size()], 4);
  // A second gather reads from the advanced cursor: rows 4..5 of the order.
  Tensor x2 = nan_on_gpu(Shape{2, 1, 5, 3}), y2 = Tensor::zeros(Shape{2}, DType::I32, kGpu);
  cuda::gather_batch(ctx(), images.to(kGpu), lab.to(kGpu), ds.scale(), order_g, 0, 2, 0, x2, y2);
  Tensor x2c, y2c;
  ds.gather(std::span<const int64_t>(order.data() + 4, 2), x2c, y2c);
  EXPECT_EQ(x2.to_vector(), x2c.to_vector());
  // Rows the order cannot hold are refused on the host.
  EXPECT_THROW(cuda::gather_batch(ctx(), images.to(kGpu), lab.to(kGpu), ds.scale(), order_g, 4, 5, 0, xg, yg),
               ShapeError);
}

TEST_F(Parity, DenseForwardAndBackwardWithRelu) {
  // Fewer columns than a column-sum block (29 < 32), rows not a multiple of its 16 thread rows;
  // then a batch of 1024 over 70 outputs (3 blocks, the last partial).
  for (const auto& [n, in, out] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{37, 131, 29}, {1024, 64, 70}, {70001, 3, 5}}) {
    const Tensor x = test::random_tensor(Shape{n, in}, 5), w = test::random_tensor(Shape{out, in}, 6, -0.2f, 0.2f),
                 b = test::random_tensor(Shape{out}, 7);
    Tensor y = Tensor::empty(Shape{n, out}), z = Tensor::empty(Shape{n, out}),
           dy = test::random_tensor(Shape{n, out}, 8);
    Tensor dx = Tensor::empty(x.shape()), dw = Tensor::empty(w.shape()), db = Tensor::empty(b.shape());
    Tensor dz = Tensor::empty(dy.shape());
    cpu::dense_forward(x, w, b, true, y);
    cpu::dense_forward(x, w, b, false, z);  // the pre-activation

    const Tensor xg = x.to(kGpu), wg = w.to(kGpu), bg = b.to(kGpu);
    Tensor yg = nan_on_gpu(y.shape()), dxg = nan_on_gpu(x.shape()), dwg = nan_on_gpu(w.shape()),
           dbg = nan_on_gpu(b.shape()), dzg = nan_on_gpu(dy.shape());
    const Tensor dyg = dy.to(kGpu);
    cuda::dense_forward(ctx(), xg, wg, bg, true, yg);
    cuda::dense_backward(ctx(), xg, wg, yg, dyg, true, dzg, &dxg, dwg, dbg);
    ctx().synchronize();
    // Sums of up to 131 products, or 1024 rows, in another order (cuBLAS vs oneDNN, a tree vs a
    // loop): ~1e-6 relative; 1e-5 is far below a transposed operand or a missing bias (O(1)).
    // The 70001-row weight and bias gradients are float sums of that length, compared to their
    // tensor's scale (long_sum_error): the GPU's 16 sequential partials of ~4,375 rows of
    // |dz| ~ 0.4 round by ~1.3e-4 in all, against entries of ~100 (0.4 * sqrt(70001)), so ~1e-6 of
    // the scale; 1e-5 of it still fails one row lost or counted twice (~0.4 in one entry: ~3e-3).
    const auto sums_error = [n](const Tensor& got, const Tensor& want) {
      return n > 1024 ? test::long_sum_error(got.to_vector(), want.to_vector())
                      : rel_error(got.to_vector(), want.to_vector());
    };
    EXPECT_LE(rel_error(yg.to_vector(), y.to_vector()), 1e-5) << n;
    // The backward against the CPU's run with the GPU's y, so that both apply the same ReLU mask:
    // cuBLAS's order of summation may put a pre-activation within rounding of 0 on the other
    // side; that is counted below and allowed only there (|z| < 1e-5, at most 0.1%).
    const Tensor y_gpu = yg.to(Device::cpu());
    cpu::dense_backward(x, w, y_gpu, dy, true, dz, &dx, dw, db);
    EXPECT_LE(rel_error(dxg.to_vector(), dx.to_vector()), 1e-5) << n;
    EXPECT_LE(sums_error(dwg, dw), 1e-5) << n;
    EXPECT_LE(sums_error(dbg, db), 1e-5) << n;
    EXPECT_EQ(dzg.to_vector(), dz.to_vector()) << n;  // the same mask: exact
    const test::ReluFlips flips = test::relu_flips(y_gpu, z);
    EXPECT_EQ(flips.far, 0) << n << ": " << flips.all << " ReLU decisions differ from the CPU's";
    EXPECT_LE(flips.all, n * out / 1000) << n;
    EXPECT_EQ(dyg.to_vector(), dy.to_vector()) << n;  // dy is read only
  }
}

// A geometry as the layers build it (Keras' SAME/VALID along each axis).
Conv2dShape conv_geometry(int64_t h, int64_t w, int64_t r, int64_t s, int64_t stride, Padding padding) {
  Conv2dShape g;
  g.n = 3, g.c = 4, g.h = h, g.w = w, g.k = 6, g.r = r, g.s = s, g.stride_h = stride, g.stride_w = stride,
  g.relu = true;
  const AxisGeometry ah = axis_geometry(h, r, stride, padding), aw = axis_geometry(w, s, stride, padding);
  g.pad_top = ah.pad_before, g.pad_bottom = ah.pad_after, g.p = ah.out;
  g.pad_left = aw.pad_before, g.pad_right = aw.pad_after, g.q = aw.out;
  return g;
}

Pool2dShape pool_geometry(int64_t h, int64_t w, int64_t r, int64_t stride, Padding padding) {
  Pool2dShape g;
  g.n = 2, g.c = 5, g.h = h, g.w = w, g.r = r, g.s = r, g.stride_h = stride, g.stride_w = stride;
  const AxisGeometry ah = axis_geometry(h, r, stride, padding), aw = axis_geometry(w, r, stride, padding);
  g.pad_top = ah.pad_before, g.p = ah.out, g.pad_left = aw.pad_before, g.q = aw.out;
  return g;
}

// Valid; SAME with symmetric padding (cuDNN pads); SAME with an even kernel and with a stride
// (one more row/column at the bottom/right: explicit padding on the GPU).
TEST_F(Parity, Conv2dForwardAndBackward) {
  const test::GpuSettingsScope settings;  // cudnnFind, the fused forward and NHWC back as they were
  const std::vector<std::pair<std::string, Conv2dShape>> cases = {
      {"valid 3x3", conv_geometry(9, 8, 3, 3, 1, Padding::Valid)},
      {"same 3x3", conv_geometry(9, 8, 3, 3, 1, Padding::Same)},
      {"same 2x2 (pads 0/1)", conv_geometry(9, 8, 2, 2, 1, Padding::Same)},
      {"same 3x3 stride 2 (pads 1/1 and 0/1)", conv_geometry(9, 8, 3, 3, 2, Padding::Same)}};
  // cuDNN's heuristic choice, every algorithm timed (cudnnFind), the fused forward (convolution
  // + bias + ReLU in one call), and channels-last activations (gpu_nhwc: symmetric padding
  // only, as the layers' dispatch uses it): each must match the CPU.
  for (const std::string mode : {"heuristics", "cudnnFind", "forward fused", "NHWC", "NHWC, forward fused"})
    for (const auto& [label, g] : cases) {
      const bool nhwc = mode.starts_with("NHWC"), fused = mode.ends_with("fused");
      if (nhwc && (g.pad_top != g.pad_bottom || g.pad_left != g.pad_right)) continue;
      set_cudnn_find(mode == "cudnnFind");
      set_fused_conv(fused);
      set_gpu_nhwc(nhwc);
      const Tensor x = test::random_tensor(Shape{g.n, g.c, g.h, g.w}, 21),
                   w = test::random_tensor(Shape{g.k, g.c, g.r, g.s}, 22, -0.3f, 0.3f),
                   b = test::random_tensor(Shape{g.k}, 23), dy = test::random_tensor(Shape{g.n, g.k, g.p, g.q}, 24);
      // CPU reference (NHWC inside), compared in logical order.
      const Tensor xn = x.to_layout(Layout::NHWC), dyn = dy.to_layout(Layout::NHWC);
      Tensor y = Tensor::empty(dy.shape(), DType::F32, Device::cpu(), Layout::NHWC);
      Tensor dx = Tensor::empty(x.shape(), DType::F32, Device::cpu(), Layout::NHWC);
      Tensor dw = Tensor::empty(w.shape()), db = Tensor::empty(b.shape());
      cpu::conv2d_forward(g, xn, w, b, y);
      cpu::conv2d_backward(g, xn, w, y, dyn, &dx, dw, db);

      const Layout act = nhwc ? Layout::NHWC : Layout::RowMajor;  // the GPU activations' layout
      const Tensor xg = x.to_layout(act).to(kGpu), wg = w.to(kGpu), bg = b.to(kGpu), dyg = dy.to_layout(act).to(kGpu);
      Tensor yg = nan_on_gpu(dy.shape(), act), dxg = nan_on_gpu(x.shape(), act), dwg = nan_on_gpu(w.shape()),
             dbg = nan_on_gpu(b.shape());
      cuda::conv2d_forward(ctx(), g, xg, wg, bg, yg, plan_slot());
      cuda::conv2d_backward(ctx(), g, xg, wg, yg, dyg, &dxg, dwg, dbg, false, plan_slot());
      ctx().synchronize();
      // Sums of <= 36 products (forward, dx) or 3*9*8 = 216 (dw, db) in other orders, and cuDNN
      // may pick FFT/Winograd: 1e-4 relative is still 1000x below a wrong index or a lost bias.
      EXPECT_LE(rel_error(yg.to_vector(), y.to_vector()), 1e-4) << label << ", " << mode;
      EXPECT_LE(rel_error(dxg.to_vector(), dx.to_vector()), 1e-4) << label;
      EXPECT_LE(rel_error(dwg.to_vector(), dw.to_vector()), 1e-4) << label;
      EXPECT_LE(rel_error(dbg.to_vector(), db.to_vector()), 1e-4) << label;
      const std::string info = cuda::conv2d_kernel_info(ctx(), g);
      EXPECT_NE(info.find(nhwc ? "NHWC" : "NCHW"), std::string::npos) << label << ", " << mode << ": " << info;
      // The fused forward needs cuDNN to list implicit precomp GEMM for the shape: with NCHW
      // activations its support tables always have; with NHWC activations and KRSC filters cuDNN 9's
      // heuristics decide, and the three-call forward that then runs (named in the info) is checked
      // by the numbers above: printed there, asserted for NCHW only.
      if (fused && !nhwc) {
        EXPECT_NE(info.find("forward fused"), std::string::npos) << label << ": " << info;
      } else if (fused && info.find("forward fused") == std::string::npos) {
        std::printf("%s, %s: %s\n", label.c_str(), mode.c_str(), info.c_str());
      }
      if (!nhwc && !fused) {
        EXPECT_NE(info.find(mode), std::string::npos) << label << ": " << info;
      }
    }
  set_cudnn_find(false);
  set_fused_conv(false);
  set_gpu_nhwc(false);
  // An NHWC activation with asymmetric padding is refused (the dispatch never makes one).
  const Conv2dShape asym = cases[2].second;
  Tensor xa = nan_on_gpu(Shape{asym.n, asym.c, asym.h, asym.w}, Layout::NHWC);
  Tensor ya = nan_on_gpu(Shape{asym.n, asym.k, asym.p, asym.q}, Layout::NHWC);
  EXPECT_THROW(cuda::conv2d_forward(ctx(), asym, xa, nan_on_gpu(Shape{asym.k, asym.c, asym.r, asym.s}),
                                    nan_on_gpu(Shape{asym.k}), ya, plan_slot()),
               ShapeError);
}

// Deterministic mode picks algorithms that say so (or fails naming the shape): two backward
// passes give the same bits, and the plan reports all three as deterministic.
TEST_F(Parity, DeterministicConvolutionsGiveTheSameBitsTwice) {
  const test::GpuSettingsScope settings;  // restored however the test ends
  set_gpu_deterministic(true);
  const Conv2dShape g = conv_geometry(9, 8, 3, 3, 1, Padding::Same);
  const Tensor x = test::random_tensor(Shape{g.n, g.c, g.h, g.w}, 31).to(kGpu),
               w = test::random_tensor(Shape{g.k, g.c, g.r, g.s}, 32, -0.3f, 0.3f).to(kGpu),
               b = test::random_tensor(Shape{g.k}, 33).to(kGpu),
               dy = test::random_tensor(Shape{g.n, g.k, g.p, g.q}, 34).to(kGpu);
  std::vector<float> first;
  for (int run = 0; run < 2; ++run) {
    Tensor y = nan_on_gpu(dy.shape()), dx = nan_on_gpu(x.shape()), dw = nan_on_gpu(w.shape()),
           db = nan_on_gpu(b.shape());
    cuda::conv2d_forward(ctx(), g, x, w, b, y, plan_slot());
    cuda::conv2d_backward(ctx(), g, x, w, y, dy, &dx, dw, db, false, plan_slot());
    std::vector<float> all = y.to_vector(), v = dx.to_vector(), u = dw.to_vector();
    all.insert(all.end(), v.begin(), v.end());
    all.insert(all.end(), u.begin(), u.end());
    if (run == 0)
      first = all;
    else
      EXPECT_TRUE(all == first) << "deterministic mode gave other bits on the second run";
  }
  const std::string info = cuda::conv2d_kernel_info(ctx(), g);
  EXPECT_NE(info.find(", deterministic"), std::string::npos) << info;
}

// 2x2/2 tiling; VALID that leaves the last row/column out; SAME 3x3/1 (overlapping windows,
// padded 1 each side); SAME 2x2/2 on an odd input (one more at the bottom/right); each in NCHW and
// NHWC. x takes five values only, so most windows hold equal maxima (and zeros, which the fused
// ReLU masks): both devices must pick the same one, the first in the window's row-major order.
TEST_F(Parity, MaxPoolForwardAndBackwardWithFusedRelu) {
  const std::vector<std::pair<std::string, Pool2dShape>> cases = {
      {"2x2/2 on 8x6", pool_geometry(8, 6, 2, 2, Padding::Valid)},
      {"valid 2x2/2 on 7x7", pool_geometry(7, 7, 2, 2, Padding::Valid)},
      {"same 3x3/1 on 6x6", pool_geometry(6, 6, 3, 1, Padding::Same)},
      {"same 2x2/2 on 7x5", pool_geometry(7, 5, 2, 2, Padding::Same)}};
  for (const bool nhwc : {false, true})
    for (const auto& [label, g] : cases) {
      const Layout act = nhwc ? Layout::NHWC : Layout::RowMajor;
      Tensor x = test::random_tensor(Shape{g.n, g.c, g.h, g.w}, 31);
      for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = std::round(x.f32()[i] * 2.0f) / 2.0f;  // ties
      Tensor dy = test::random_tensor(Shape{g.n, g.c, g.p, g.q}, 32);
      for (int64_t i = 0; i < dy.numel(); i += 3) dy.f32()[i] = -0.0f;  // its sign must come through as the CPU's
      const Tensor xn = x.to_layout(Layout::NHWC), dyn = dy.to_layout(Layout::NHWC);
      Tensor y = Tensor::empty(dy.shape(), DType::F32, Device::cpu(), Layout::NHWC);
      Tensor am = Tensor::empty(dy.shape(), DType::I32, Device::cpu(), Layout::NHWC);
      Tensor dx = Tensor::empty(x.shape(), DType::F32, Device::cpu(), Layout::NHWC);
      cpu::maxpool2d_forward(g, xn, y, &am);
      cpu::maxpool2d_backward(g, xn, y, dyn, &am, dx, true);  // ReLU fused: x plays the ReLU's output

      const Tensor xg = x.to_layout(act).to(kGpu), dyg = dy.to_layout(act).to(kGpu);
      Tensor yg = nan_on_gpu(dy.shape(), act), dxg = nan_on_gpu(x.shape(), act);
      cuda::maxpool2d_forward(ctx(), g, xg, yg, nullptr, plan_slot());
      cuda::maxpool2d_backward(ctx(), g, xg, yg, dyg, nullptr, dxg, true, plan_slot());
      ctx().synchronize();
      EXPECT_EQ(yg.layout(), act) << label;
      EXPECT_EQ(dxg.layout(), act) << label;
      // A max selects: exact. Routing and masking: exact. Overlapping windows (3x3/1) add several
      // dy into one dx in the outputs' row-major order on both devices: exact too. Bit for bit,
      // so that a zero's sign counts.
      const auto bits = [](const std::vector<float>& v) {
        std::vector<uint32_t> b(v.size());
        std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
        return b;
      };
      EXPECT_EQ(bits(yg.to_vector()), bits(y.to_vector())) << label << (nhwc ? " (NHWC)" : "");
      EXPECT_EQ(bits(dxg.to_vector()), bits(dx.to_vector())) << label << (nhwc ? " (NHWC)" : "");
    }
}

// Layout changes on the GPU (a kernel there) give the CPU's permutation bit for bit, both ways,
// for every element size.
TEST_F(Parity, LayoutChangesOnTheGpuEqualTheCpu) {
  const Tensor x = test::random_tensor(Shape{3, 5, 7, 2}, 41);
  const Tensor nhwc_gpu = x.to(kGpu).to_layout(Layout::NHWC);
  EXPECT_EQ(nhwc_gpu.layout(), Layout::NHWC);
  EXPECT_EQ(nhwc_gpu.device(), kGpu);
  const Tensor nhwc_cpu = x.to_layout(Layout::NHWC);
  const Tensor back = nhwc_gpu.to(Device::cpu());  // same layout: a plain copy of the bytes
  EXPECT_EQ(std::vector<float>(back.f32(), back.f32() + back.numel()),
            std::vector<float>(nhwc_cpu.f32(), nhwc_cpu.f32() + nhwc_cpu.numel()));
  EXPECT_EQ(nhwc_gpu.to_layout(Layout::RowMajor).to_vector(), x.to_vector());
  Tensor bytes = Tensor::empty(Shape{2, 3, 4, 5}, DType::U8);
  for (int64_t i = 0; i < bytes.numel(); ++i) bytes.data<uint8_t>()[i] = static_cast<uint8_t>(i);
  const Tensor bg = bytes.to(kGpu).to_layout(Layout::NHWC).to(Device::cpu()), bc = bytes.to_layout(Layout::NHWC);
  EXPECT_TRUE(std::equal(bg.data<uint8_t>(), bg.data<uint8_t>() + bg.numel(), bc.data<uint8_t>()));
}

// ---- Pointwise, softmax, dropout, normalisation and pooling ops: Sigmoid/Tanh/LeakyReLU, Softmax, Dropout,
// BatchNormalization, average pools.

// Elementwise in any layout (NCHW and NHWC here; odd sizes, one element on LeakyReLU's kink).
// Tolerances in ulps of 1 (kUlp1 = 2^-23; every value here is O(1), so rel_error's floor of 1
// makes them absolute there):
//  - forward: CUDA's expf and tanhf are within 2 ulp of the correctly rounded result, glibc's
//    within 1 (expf) and 2 (tanhf); sigmoid adds one addition and one IEEE division (the same on
//    both). The outputs are < 1, so 4 ulp of 1 bounds the difference with room to spare.
//  - backward, run on both sides from the same x and the CPU's y (so only its own arithmetic is
//    compared): nvcc may contract tanh's 1 - y*y into one FMA where the CPU rounds twice (half
//    an ulp of 1, times |dy| <= 1); sigmoid's dy*y*(1-y) has nothing to contract. 2 ulp.
//  - LeakyReLU is a select and at most one product either way: bit-exact.
// In place (y == x), which the GPU contract allows, gives the out-of-place bits.
TEST_F(Parity, SigmoidTanhLeakyReluForwardAndBackward) {
  using detail::Pointwise;
  const float alpha = 0.2f;
  const std::vector<std::pair<Pointwise, std::string>> ops = {
      {Pointwise::Sigmoid, "sigmoid"}, {Pointwise::Tanh, "tanh"}, {Pointwise::LeakyReLU, "leaky_relu"}};
  for (const Layout layout : {Layout::RowMajor, Layout::NHWC})
    for (const auto& [f, name] : ops) {
      const std::string label = name + (layout == Layout::NHWC ? " (NHWC)" : " (NCHW)");
      Tensor x = test::random_tensor(Shape{3, 5, 7, 9}, 51, -6.0f, 6.0f);
      x.f32()[0] = 0.0f;  // LeakyReLU's kink: x > 0 is false on both, the slope below applies
      const Tensor xl = x.to_layout(layout), dyl = test::random_tensor(x.shape(), 52).to_layout(layout);
      Tensor y = Tensor::empty(x.shape(), DType::F32, Device::cpu(), layout);
      Tensor dx = Tensor::empty(x.shape(), DType::F32, Device::cpu(), layout);
      cpu::pointwise_forward(f, alpha, xl, y);
      cpu::pointwise_backward(f, alpha, xl, y, dyl, dx);

      const Tensor xg = xl.to(kGpu), dyg = dyl.to(kGpu), y_cpu_on_gpu = y.to(kGpu);
      Tensor yg = nan_on_gpu(x.shape(), layout), dxg = nan_on_gpu(x.shape(), layout);
      cuda::pointwise_forward(ctx(), f, alpha, xg, yg);
      cuda::pointwise_backward(ctx(), f, alpha, xg, y_cpu_on_gpu, dyg, dxg);
      Tensor in_place = xl.to(kGpu);
      cuda::pointwise_forward(ctx(), f, alpha, in_place, in_place);
      ctx().synchronize();
      EXPECT_EQ(yg.layout(), layout) << label;
      if (f == Pointwise::LeakyReLU) {
        EXPECT_EQ(yg.to_vector(), y.to_vector()) << label;
        EXPECT_EQ(dxg.to_vector(), dx.to_vector()) << label;
      } else {
        EXPECT_LE(rel_error(yg.to_vector(), y.to_vector()), 4 * kUlp1) << label;
        EXPECT_LE(rel_error(dxg.to_vector(), dx.to_vector()), 2 * kUlp1) << label;
      }
      EXPECT_EQ(in_place.to_vector(), yg.to_vector()) << label;
    }
}

// GELU, exact and tanh form, on x in [-6, 6] and 0. Each side is within 4u max(1, |x|) of the
// function for y and 8u max(1, x^2) for dx (u = kUlp1; test_activations.cpp's GeluMatchesPyTorch
// derives the CPU's): CUDA's erff, expf and tanhf are within 2 ulp as glibc's are within 1-2, and
// nvcc and GCC may each contract a product and a sum into one FMA in other places, an error of the
// same size. So the two differ by at most twice that: 8u max(1, |x|) and 16u max(1, x^2).
TEST_F(Parity, GeluForwardAndBackward) {
  using detail::Pointwise;
  for (const Pointwise f : {Pointwise::Gelu, Pointwise::GeluTanh}) {
    const std::string label = f == Pointwise::Gelu ? "gelu" : "gelu (tanh)";
    Tensor x = test::random_tensor(Shape{5, 7, 9}, 53, -6.0f, 6.0f);
    x.f32()[0] = 0.0f;
    const Tensor dy = test::random_tensor(x.shape(), 54);
    Tensor y = Tensor::empty(x.shape(), DType::F32, Device::cpu());
    Tensor dx = Tensor::empty(x.shape(), DType::F32, Device::cpu());
    cpu::pointwise_forward(f, 0.0f, x, y);
    cpu::pointwise_backward(f, 0.0f, x, y, dy, dx);
    const Tensor xg = x.to(kGpu), dyg = dy.to(kGpu), yc = y.to(kGpu);
    Tensor yg = nan_on_gpu(x.shape(), Layout::RowMajor), dxg = nan_on_gpu(x.shape(), Layout::RowMajor);
    cuda::pointwise_forward(ctx(), f, 0.0f, xg, yg);
    cuda::pointwise_backward(ctx(), f, 0.0f, xg, yc, dyg, dxg);
    ctx().synchronize();
    const std::vector<float> xs = x.to_vector(), a = yg.to_vector(), b = y.to_vector();
    const std::vector<float> da = dxg.to_vector(), db = dx.to_vector();
    double worst_y = 0, worst_dx = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const double s = std::max(1.0, std::abs(double(xs[i])));
      worst_y = std::max(worst_y, std::abs(double(a[i]) - b[i]) / s);  // NaN fails below
      worst_dx = std::max(worst_dx, std::abs(double(da[i]) - db[i]) / (s * s));
      if (std::isnan(a[i]) || std::isnan(da[i])) worst_y = worst_dx = INFINITY;
    }
    EXPECT_LE(worst_y, 8 * kUlp1) << label;
    EXPECT_LE(worst_dx, 16 * kUlp1) << label;
    EXPECT_EQ(a[0], 0.0f) << label;  // GELU(0) = 0 on both
  }
}

// Row softmax over K = 10 (a classifier's rows: most lanes of the GPU's warp per row idle) and
// K = 1000 (~31 values per lane), and more rows than the capped grid has warps (4096 x 8).
//  - forward: both sum the float exponentials in double and scale by the rounded inverse of
//    the sum; only expf differs (<= 2 ulp on the GPU, < 1 on the CPU): ~4 ulp (5e-7) relative
//    per probability. Measured relative to each probability itself (K = 1000 gives values down
//    to ~3e-6, where the floor of 1 would check nothing): 1e-5, far below a wrong max or sum.
//  - backward, on both from the CPU's y: dx = y (dy - s), s = sum(dy y) summed in double in
//    another order, so s may differ in its last float bit; where dy ~ s that cancels, so each
//    element is measured against y (|dy| + |s|), the size of what it is computed from: 1e-6.
TEST_F(Parity, SoftmaxForwardAndBackward) {
  for (const auto& [n, k] : std::vector<std::pair<int64_t, int64_t>>{{37, 10}, {19, 1000}, {40000, 10}}) {
    const std::string label = "(" + std::to_string(n) + ", " + std::to_string(k) + ")";
    const Tensor x = test::random_tensor(Shape{n, k}, 61, -4.0f, 4.0f), dy = test::random_tensor(Shape{n, k}, 62);
    Tensor y = Tensor::empty(x.shape()), dx = Tensor::empty(x.shape());
    cpu::softmax_forward(x, y);
    cpu::softmax_backward(y, dy, dx);
    const Tensor xg = x.to(kGpu);
    Tensor yg = nan_on_gpu(x.shape()), dxg = nan_on_gpu(x.shape());
    cuda::softmax_forward(ctx(), xg, yg);
    cuda::softmax_backward(ctx(), y.to(kGpu), dy.to(kGpu), dxg);
    Tensor in_place = x.to(kGpu);
    cuda::softmax_forward(ctx(), in_place, in_place);
    ctx().synchronize();
    EXPECT_LE(rel_error(yg.to_vector(), y.to_vector(), 1e-30), 1e-5) << label;
    EXPECT_EQ(in_place.to_vector(), yg.to_vector()) << label;
    const std::vector<float> yv = y.to_vector(), gv = dy.to_vector(), want = dx.to_vector(), got = dxg.to_vector();
    double worst = 0;
    for (int64_t r = 0; r < n; ++r) {
      double s = 0;
      for (int64_t j = 0; j < k; ++j) s += double(gv[r * k + j]) * yv[r * k + j];
      for (int64_t j = 0; j < k; ++j) {
        const size_t i = static_cast<size_t>(r * k + j);
        const double scale = double(yv[i]) * (std::abs(double(gv[i])) + std::abs(s));
        worst = std::isnan(got[i]) ? std::numeric_limits<double>::infinity()
                                   : std::max(worst, std::abs(double(got[i]) - want[i]) / scale);
      }
    }
    EXPECT_LE(worst, 1e-6) << label;
  }
}

// Dropout's mask is a counter-based hash of (seed, step, logical NCHW index): the CPU and the
// GPU draw the same bits in either layout (compared exactly: output, mask and input gradient),
// two consecutive steps differ, and the step counter, on the device, is advanced there. More
// elements than the GPU's capped grid (4096 x 256) covers in one pass.
TEST_F(Parity, DropoutMasksAreBitIdenticalInBothLayouts) {
  const float rate = 0.4f;
  const detail::DropoutParams p{.seed = 0x5EEDF00Dull,
                                .threshold = static_cast<uint32_t>(std::ceil(double(rate) * detail::kCounterBase)),
                                .scale = 1.0f / (1.0f - rate)};
  const Shape shape{3, 7, 229, 231};  // 1,110,879 elements
  const Tensor x = test::random_tensor(shape, 71, 0.5f, 1.5f), dy = test::random_tensor(shape, 72);
  std::vector<std::vector<uint8_t>> masks[2];  // per layout, per step (logical order)
  for (const Layout layout : {Layout::RowMajor, Layout::NHWC}) {
    const std::string label = layout == Layout::NHWC ? "NHWC" : "NCHW";
    const Tensor xl = x.to_layout(layout), dyl = dy.to_layout(layout);
    const Tensor xg = xl.to(kGpu), dyg = dyl.to(kGpu);
    Tensor counter = Tensor::zeros(Shape{2}), counter_g = Tensor::zeros(Shape{2}, DType::F32, kGpu);
    for (int step = 0; step < 2; ++step) {
      Tensor y = Tensor::empty(shape, DType::F32, Device::cpu(), layout);
      Tensor mask = Tensor::empty(shape, DType::U8, Device::cpu(), layout);
      Tensor dx = Tensor::empty(shape, DType::F32, Device::cpu(), layout);
      cpu::dropout_forward(p, counter, xl, y, mask);
      cpu::dropout_advance(counter);
      cpu::dropout_backward(p.scale, mask, dyl, dx);
      Tensor yg = nan_on_gpu(shape, layout), dxg = nan_on_gpu(shape, layout);
      Tensor mask_g = Tensor::empty(shape, DType::U8, Device::cpu(), layout);
      std::fill(mask_g.data<uint8_t>(), mask_g.data<uint8_t>() + mask_g.numel(), uint8_t{77});
      mask_g = mask_g.to(kGpu);
      cuda::dropout_forward(ctx(), p, counter_g, xg, yg, mask_g);
      cuda::dropout_advance(ctx(), counter_g);
      cuda::dropout_backward(ctx(), p.scale, mask_g, dyg, dxg);
      ctx().synchronize();
      EXPECT_EQ(yg.to_vector(), y.to_vector()) << label << " step " << step;
      masks[layout == Layout::NHWC].push_back(bytes_of(mask));
      EXPECT_EQ(bytes_of(mask_g), masks[layout == Layout::NHWC].back()) << label << " step " << step;
      EXPECT_EQ(dxg.to_vector(), dx.to_vector()) << label << " step " << step;
      // In place (y == x), allowed on the GPU, at the same step: the same bits.
      Tensor in_place = xl.to(kGpu), mask_ip = Tensor::empty(shape, DType::U8, kGpu, layout);
      Tensor same_step = Tensor::from_vector(Shape{2}, std::vector<float>{float(step), 0.0f}).to(kGpu);
      cuda::dropout_forward(ctx(), p, same_step, in_place, in_place, mask_ip);
      EXPECT_EQ(in_place.to_vector(), yg.to_vector()) << label << " step " << step;
    }
    EXPECT_EQ(counter_g.to_vector(), (std::vector<float>{2.0f, 0.0f})) << label;
    EXPECT_EQ(counter.to_vector(), (std::vector<float>{2.0f, 0.0f})) << label;
    EXPECT_NE(masks[layout == Layout::NHWC][0], masks[layout == Layout::NHWC][1]) << label << ": a step draws anew";
  }
  EXPECT_EQ(masks[0], masks[1]) << "the mask depends on the layout";
  int64_t dropped = 0;
  for (uint8_t k : masks[0][0]) dropped += k == 0;
  // Binomial(1.1e6, 0.4): standard deviation ~516; 5,000 is ~10 of them.
  EXPECT_NEAR(double(dropped), 0.4 * double(shape.numel()), 5000.0);

  // A counter past 2^24 steps ([lo, hi] = [2^24 - 1, 5]): the same key on both; the device's
  // advance carries into hi exactly as the host's.
  const Tensor xs = test::random_tensor(Shape{4, 50}, 73, 0.5f, 1.5f);
  Tensor c = Tensor::from_vector(Shape{2}, std::vector<float>{16777215.0f, 5.0f}), cg = c.to(kGpu);
  Tensor y = Tensor::empty(xs.shape()), m = Tensor::empty(xs.shape(), DType::U8);
  Tensor yg = nan_on_gpu(xs.shape()), mg = Tensor::zeros(xs.shape(), DType::U8, kGpu);
  cpu::dropout_forward(p, c, xs, y, m);
  cuda::dropout_forward(ctx(), p, cg, xs.to(kGpu), yg, mg);
  cuda::dropout_advance(ctx(), cg);
  EXPECT_EQ(yg.to_vector(), y.to_vector());
  EXPECT_EQ(bytes_of(mg), bytes_of(m));
  EXPECT_EQ(cg.to_vector(), (std::vector<float>{0.0f, 6.0f}));
}

// The Dropout layer on the GPU (its step counter in device state, as a model on the GPU holds
// it): two training steps draw exactly the CPU layer's outputs and input gradients, for NCHW and
// NHWC 4-D input (the output keeps the input's layout) and (N, F) input, with the output
// gradient given row-major (the dispatch converts it); the counter reads {2, 0} afterwards.
TEST_F(Parity, DropoutLayerDrawsTheCpuMasksAndCountsOnTheDevice) {
  const std::vector<std::pair<Shape, Layout>> inputs = {
      {Shape{4, 6, 5, 7}, Layout::RowMajor}, {Shape{4, 6, 5, 7}, Layout::NHWC}, {Shape{8, 90}, Layout::RowMajor}};
  for (const auto& [shape, layout] : inputs) {
    const std::string label = shape.str() + (layout == Layout::NHWC ? " NHWC" : "");
    Dropout on_cpu(0.5f), on_gpu(0.5f);
    test::build_standalone(on_cpu, shape.without_batch(), 11);
    test::build_standalone(on_gpu, shape.without_batch(), 11);
    move_to_gpu(on_gpu);
    ASSERT_EQ(on_gpu.state()[0].device(), kGpu);
    for (int step = 0; step < 2; ++step) {
      const Tensor x = test::random_tensor(shape, 80 + static_cast<uint64_t>(step), 0.5f, 1.5f).to_layout(layout);
      const Tensor dy = test::random_tensor(shape, 90 + static_cast<uint64_t>(step));
      const Tensor xg = x.to(kGpu), dyg = dy.to(kGpu);
      const std::vector<float> yc = on_cpu.forward(x, true).to_vector();
      const Tensor& yg = on_gpu.forward(xg, true);
      EXPECT_EQ(yg.device(), kGpu) << label;
      EXPECT_EQ(yg.layout(), layout) << label;
      EXPECT_EQ(yg.to_vector(), yc) << label << " step " << step;
      const std::vector<float> dxc = on_cpu.backward(dy).to_vector();
      EXPECT_EQ(on_gpu.backward(dyg).to_vector(), dxc) << label << " step " << step;
    }
    EXPECT_EQ(on_gpu.state()[0].to_vector(), (std::vector<float>{2.0f, 0.0f})) << label;
    EXPECT_EQ(on_cpu.state()[0].to_vector(), (std::vector<float>{2.0f, 0.0f})) << label;
    // Inference passes the input through and counts nothing.
    const Tensor x = test::random_tensor(shape, 99).to_layout(layout);
    EXPECT_EQ(on_gpu.forward(x.to(kGpu), false).to_vector(), x.to_vector()) << label;
    EXPECT_EQ(on_gpu.state()[0].to_vector(), (std::vector<float>{2.0f, 0.0f})) << label;
  }
}

// The augmentation layers on the GPU (the step counter in device state): two training steps move
// exactly the CPU layers' pixels forward and back (pure data movement and one fused multiply-add:
// the same bits), with the counter advanced by the kernel's last block or a launch of its own, for
// NCHW and NHWC input; inference takes the central window. Rescaling on any shape.
TEST_F(Parity, AugmentationLayersMoveTheCpuPixels) {
  const test::GpuSettingsScope settings;  // restored however the test ends
  for (const bool fold : {true, false}) {
    set_fused_advance(fold);
    for (const Layout layout : {Layout::RowMajor, Layout::NHWC}) {
      const std::string label =
          std::string(fold ? "fused advance" : "advance launched") + (layout == Layout::NHWC ? ", NHWC" : ", NCHW");
      std::vector<std::pair<std::shared_ptr<Layer>, std::shared_ptr<Layer>>> pairs = {
          {std::make_shared<RandomFlip>(), std::make_shared<RandomFlip>()},
          {std::make_shared<RandomTranslation>(0.3f, 0.2f), std::make_shared<RandomTranslation>(0.3f, 0.2f)},
          {std::make_shared<RandomCrop>(5, 6, 2), std::make_shared<RandomCrop>(5, 6, 2)}};
      for (auto& [on_cpu, on_gpu] : pairs) {
        test::build_standalone(*on_cpu, Shape{3, 7, 8}, 21);
        test::build_standalone(*on_gpu, Shape{3, 7, 8}, 21);
        move_to_gpu(*on_gpu);
        for (int step = 0; step < 2; ++step) {
          const Tensor x = test::random_tensor(Shape{16, 3, 7, 8}, 40 + uint64_t(step)).to_layout(layout);
          const std::vector<float> yc = on_cpu->forward(x, true).to_vector();
          const Tensor& yg = on_gpu->forward(x.to(kGpu), true);
          EXPECT_EQ(yg.to_vector(), yc) << on_cpu->type() << ", " << label << ", step " << step;
          const Tensor dy = test::random_tensor(yg.shape(), 50 + uint64_t(step));
          const std::vector<float> dxc = on_cpu->backward(dy).to_vector();
          EXPECT_EQ(on_gpu->backward(dy.to(kGpu)).to_vector(), dxc) << on_cpu->type() << ", " << label;
        }
        EXPECT_EQ(on_gpu->state()[0].to_vector(), (std::vector<float>{2.0f, 0.0f})) << on_cpu->type() << label;
        const Tensor x = test::random_tensor(Shape{4, 3, 7, 8}, 60).to_layout(layout);
        EXPECT_EQ(on_gpu->forward(x.to(kGpu), false).to_vector(), on_cpu->forward(x, false).to_vector()) << label;
      }
    }
  }
  Rescaling on_cpu(0.25f, -1.0f), on_gpu(0.25f, -1.0f);
  test::build_standalone(on_cpu, Shape{9, 5}, 1);
  test::build_standalone(on_gpu, Shape{9, 5}, 1);
  move_to_gpu(on_gpu);
  const Tensor x = test::random_tensor(Shape{6, 9, 5}, 70), dy = test::random_tensor(Shape{6, 9, 5}, 71);
  EXPECT_EQ(on_gpu.forward(x.to(kGpu), true).to_vector(), on_cpu.forward(x, true).to_vector());
  EXPECT_EQ(on_gpu.backward(dy.to(kGpu)).to_vector(), on_cpu.backward(dy).to_vector());
}

// MultiHeadAttention with dropout 0.25 as a layer on both devices, through the attention op's
// dispatch (the GPU's Dropout kernel between its phases, the counter on the device, advanced by
// the kernel's last block or by a launch of its own): two training steps draw the same masks as the
// CPU (outputs and input gradients within the attention parity case's bound), the counters agree,
// and inference drops nothing and counts nothing.
TEST_F(Parity, AttentionDropoutLayerMatchesTheCpu) {
  const test::GpuSettingsScope settings;  // restored however the test ends
  for (const bool fold : {true, false}) {
    set_fused_advance(fold);
    const std::string label = fold ? "fused advance" : "advance launched";
    MultiHeadAttention on_cpu(2, 4, {.causal = true, .dropout = 0.25f}),
        on_gpu(2, 4, {.causal = true, .dropout = 0.25f});
    test::build_standalone(on_cpu, Shape{9, 8}, 12);
    test::build_standalone(on_gpu, Shape{9, 8}, 12);
    move_to_gpu(on_gpu);
    ASSERT_EQ(on_gpu.state()[0].device(), kGpu);
    for (int step = 0; step < 2; ++step) {
      const Tensor x = test::random_tensor(Shape{3, 9, 8}, 60 + static_cast<uint64_t>(step));
      const Tensor dy = test::random_tensor(Shape{3, 9, 8}, 70 + static_cast<uint64_t>(step));
      const std::vector<float> yc = on_cpu.forward(x, true).to_vector();
      EXPECT_LE(rel_error(on_gpu.forward(x.to(kGpu), true).to_vector(), yc), 1e-5) << label << " step " << step;
      const std::vector<float> dxc = on_cpu.backward(dy).to_vector();
      EXPECT_LE(rel_error(on_gpu.backward(dy.to(kGpu)).to_vector(), dxc), 1e-5) << label << " step " << step;
    }
    EXPECT_EQ(on_gpu.state()[0].to_vector(), (std::vector<float>{2.0f, 0.0f})) << label;
    EXPECT_EQ(on_cpu.state()[0].to_vector(), (std::vector<float>{2.0f, 0.0f})) << label;
    const Tensor x = test::random_tensor(Shape{3, 9, 8}, 99);
    EXPECT_LE(rel_error(on_gpu.forward(x.to(kGpu), false).to_vector(), on_cpu.forward(x, false).to_vector()), 1e-5)
        << label;
    EXPECT_EQ(on_gpu.state()[0].to_vector(), (std::vector<float>{2.0f, 0.0f})) << label;
  }
}

// Batch normalisation (cuDNN) against the CPU's: training forward (y, the moved running
// statistics, the saved mean and inverse deviation), inference forward and backward (dx,
// dgamma, dbeta), for 4-D input NCHW and NHWC (per channel over M = N*H*W = 792 rows) and (N, F)
// input (per feature over M = 64 rows). The CPU sums in double, cuDNN in float in its own order:
// ~log2(M) roundings of O(1) partial sums, ~1e-6 relative in the statistics and the gradient
// sums (dgamma, dbeta are sums of M terms), and y, dx follow to ~1e-6. 1e-5 (floor 1; every value
// is O(1) here) leaves a margin and is still 40x below a missing Bessel factor in the moving
// variance (M / (M - 1): ~5e-4 here with factor 0.3) and far below a wrong eps or M.
TEST_F(Parity, BatchNormTrainingInferenceAndBackward) {
  const float factor = 0.3f, eps = 1e-3f;
  const std::vector<std::pair<Shape, Layout>> inputs = {
      {Shape{8, 6, 9, 11}, Layout::RowMajor}, {Shape{8, 6, 9, 11}, Layout::NHWC}, {Shape{64, 10}, Layout::RowMajor}};
  for (const auto& [shape, layout] : inputs) {
    const std::string label = shape.str() + (layout == Layout::NHWC ? " NHWC" : (shape.rank() == 4 ? " NCHW" : ""));
    const int64_t c = shape[1];
    const Tensor x = test::random_tensor(shape, 101, -1.0f, 3.0f), dy = test::random_tensor(shape, 102);
    const Tensor gamma = test::random_tensor(Shape{c}, 103, 0.5f, 1.5f), beta = test::random_tensor(Shape{c}, 104);
    const Tensor rm0 = test::random_tensor(Shape{c}, 105), rv0 = test::random_tensor(Shape{c}, 106, 0.5f, 2.0f);
    // The CPU runs 4-D input channels-last.
    const Layout cpu_layout = shape.rank() == 4 ? Layout::NHWC : Layout::RowMajor;
    const Tensor xc = x.to_layout(cpu_layout), dyc = dy.to_layout(cpu_layout);
    Tensor y = Tensor::empty(shape, DType::F32, Device::cpu(), cpu_layout), yi = y.clone(), dx = y.clone();
    Tensor rm = rm0.clone(), rv = rv0.clone(), sm = Tensor::empty(Shape{c}), si = Tensor::empty(Shape{c});
    Tensor dgamma = Tensor::empty(Shape{c}), dbeta = Tensor::empty(Shape{c});
    cpu::batchnorm_forward_training(xc, gamma, beta, factor, eps, y, rm, rv, sm, si);
    cpu::batchnorm_forward_inference(xc, gamma, beta, rm, rv, eps, yi);
    cpu::batchnorm_backward(xc, dyc, gamma, sm, si, dx, dgamma, dbeta);

    const Tensor xg = x.to_layout(layout).to(kGpu), dyg = dy.to_layout(layout).to(kGpu);
    const Tensor gg = gamma.to(kGpu), bg = beta.to(kGpu);
    Tensor yg = nan_on_gpu(shape, layout), yig = nan_on_gpu(shape, layout), dxg = nan_on_gpu(shape, layout);
    Tensor rmg = rm0.to(kGpu), rvg = rv0.to(kGpu), smg = nan_on_gpu(Shape{c}), sig = nan_on_gpu(Shape{c});
    Tensor dgg = nan_on_gpu(Shape{c}), dbg = nan_on_gpu(Shape{c});
    cuda::batchnorm_forward_training(ctx(), xg, gg, bg, factor, eps, yg, rmg, rvg, smg, sig, plan_slot());
    // Inference from the same running statistics on both (the CPU's, after its step).
    cuda::batchnorm_forward_inference(ctx(), xg, gg, bg, rm.to(kGpu), rv.to(kGpu), eps, yig, plan_slot());
    // Backward from the GPU's own saved statistics, as the layer runs it.
    cuda::batchnorm_backward(ctx(), xg, dyg, gg, smg, sig, eps, dxg, dgg, dbg, plan_slot());
    ctx().synchronize();
    EXPECT_LE(rel_error(yg.to_vector(), y.to_vector()), 1e-5) << label;
    EXPECT_LE(rel_error(rmg.to_vector(), rm.to_vector()), 1e-5) << label << ": moving mean";
    EXPECT_LE(rel_error(rvg.to_vector(), rv.to_vector()), 1e-5) << label << ": moving variance";
    EXPECT_LE(rel_error(smg.to_vector(), sm.to_vector()), 1e-5) << label << ": saved mean";
    EXPECT_LE(rel_error(sig.to_vector(), si.to_vector()), 1e-5) << label << ": saved inverse deviation";
    EXPECT_LE(rel_error(yig.to_vector(), yi.to_vector()), 1e-5) << label << ": inference";
    EXPECT_LE(rel_error(dxg.to_vector(), dx.to_vector()), 1e-5) << label << ": dx";
    EXPECT_LE(rel_error(dgg.to_vector(), dgamma.to_vector()), 1e-5) << label << ": dgamma";
    EXPECT_LE(rel_error(dbg.to_vector(), dbeta.to_vector()), 1e-5) << label << ": dbeta";
    EXPECT_EQ(yg.layout(), layout) << label;
    EXPECT_NE(rm.to_vector(), rm0.to_vector()) << label;  // the step moved the statistics
  }
}

// Attention between the projections, causal and not: 3 samples of 37 steps (rows of the softmax
// beyond a warp, a partial last block of the CPU's 16-row products), 4 heads of key width 8 and
// value width 5. Both run the same softmax formulas (layers/attention_math.h) on products that sum
// in different orders (cuBLAS' against oneDNN's), ~1e-7 relative per product of <= 37 terms of
// O(1): 1e-5 of max(1, |v|) for the outputs and probabilities, and for the gradients, whose
// products add such terms once more. The masked probabilities and their gradients are exact zeros
// on both. With dropout (rate 0.25) the two draw the same mask: any element drawn differently would
// move an output by a whole product term, far beyond the bound.
TEST_F(Parity, AttentionForwardAndBackward) {
  for (const float rate : {0.0f, 0.25f})
    for (const bool causal : {false, true}) {
      const detail::AttentionShape g{.n = 3, .t = 37, .heads = 4, .key_dim = 8, .value_dim = 5, .causal = causal};
      const Tensor qkv = test::random_tensor(Shape{g.n * g.t, g.width()}, 131, -2.0f, 2.0f);
      const Tensor dout = test::random_tensor(Shape{g.n * g.t, g.heads * g.value_dim}, 132);
      // Dropout's constants at step 5 of seed 77 (layers/attention.cpp's): the CPU draws the mask from
      // the bits, the GPU runs the Dropout kernel on the probabilities between the phases.
      const detail::DropoutParams dp{.seed = 77,
                                     .threshold = static_cast<uint32_t>(std::ceil(rate * detail::kCounterBase)),
                                     .scale = 1.0f / (1.0f - rate)};
      const cpu::AttentionDropout drop{
          .key = detail::step_key(dp.seed, 5), .threshold = dp.threshold, .scale = dp.scale};
      const cpu::AttentionDropout* d = rate > 0 ? &drop : nullptr;
      Tensor probs = Tensor::empty(Shape{g.n * g.heads, g.t, g.t}), out = Tensor::empty(dout.shape());
      Tensor dqkv = Tensor::empty(qkv.shape()), scratch;
      cpu::attention_forward(g, qkv, probs, out, scratch, d);
      cpu::attention_backward(g, qkv, probs, dout, dqkv, scratch, d);
      const Tensor qg = qkv.to(kGpu);
      Tensor pg = nan_on_gpu(probs.shape()), og = nan_on_gpu(out.shape()), dg = nan_on_gpu(qkv.shape()), sg;
      Tensor dropped = nan_on_gpu(probs.shape()), mask = Tensor::empty(probs.shape(), DType::U8, kGpu);
      Tensor counter = Tensor::empty(Shape{2});
      counter.f32()[0] = 5.0f, counter.f32()[1] = 0.0f;
      Tensor cg = counter.to(kGpu);
      cuda::attention_scores(ctx(), g, qg, pg);
      if (d) cuda::dropout_forward(ctx(), dp, cg, pg, dropped, mask, true);
      cuda::attention_values(ctx(), g, d ? dropped : pg, qg, og);
      cuda::attention_backward_values(ctx(), g, qg, d ? dropped : pg, dout.to(kGpu), dg, sg);
      if (d) cuda::dropout_backward(ctx(), dp.scale, mask, sg, sg);
      cuda::attention_backward_scores(ctx(), g, qg, pg, sg, dg);
      ctx().synchronize();
      const std::string label = std::string(causal ? "causal" : "full") + (d ? ", dropout" : "");
      EXPECT_LE(rel_error(pg.to_vector(), probs.to_vector()), 1e-5) << label;
      EXPECT_LE(rel_error(og.to_vector(), out.to_vector()), 1e-5) << label;
      EXPECT_LE(rel_error(dg.to_vector(), dqkv.to_vector()), 1e-5) << label;
      if (d) {
        EXPECT_EQ(cg.to(Device::cpu()).f32()[0], 6.0f) << label;  // the kernel advanced the counter
      }
      if (causal) {
        const std::vector<float> p = pg.to_vector();
        for (int64_t i = 0; i < g.t; ++i)
          for (int64_t j = i + 1; j < g.t; ++j) ASSERT_EQ(p[static_cast<size_t>(i * g.t + j)], 0.0f) << i << ", " << j;
      }
    }
}

// Embedding: the forward copies rows (exact); the table gradient runs the same per-(id, feature)
// tree on both (layers/embedding_math.h) over positions sorted stably by id, so it is exact too,
// rows of ids never used included (zero). 300 positions (18 full groups and a partial one) over a
// vocabulary of 37 with id 36 unused; an id outside the vocabulary is an ArgumentError on both.
TEST_F(Parity, EmbeddingForwardAndTableGradientAreExact) {
  const int64_t v = 37, c = 20, r = 300;
  Tensor ids = Tensor::empty(Shape{12, 25}, DType::I32);
  for (int64_t p = 0; p < r; ++p) ids.data<int32_t>()[p] = static_cast<int32_t>((p * 13 + p / 7) % (v - 1));
  const Tensor table = test::random_tensor(Shape{v, c}, 121), dy = test::random_tensor(Shape{12, 25, c}, 122);
  Tensor y = Tensor::empty(Shape{12, 25, c}), dt = Tensor::empty(Shape{v, c}), scratch;
  cpu::embedding_forward(ids, table, y);
  cpu::embedding_backward(ids, dy, dt, scratch);
  const Tensor idg = ids.to(kGpu);
  Tensor yg = nan_on_gpu(y.shape()), dtg = nan_on_gpu(dt.shape()), scratch_g;
  cuda::embedding_forward(ctx(), idg, table.to(kGpu), yg);
  cuda::embedding_backward(ctx(), idg, dy.to(kGpu), dtg, scratch_g);
  ctx().synchronize();
  EXPECT_EQ(yg.to_vector(), y.to_vector());
  EXPECT_EQ(dtg.to_vector(), dt.to_vector());
  Tensor bad = ids.clone();
  bad.data<int32_t>()[17] = static_cast<int32_t>(v);
  EXPECT_THROW(cuda::embedding_forward(ctx(), bad.to(kGpu), table.to(kGpu), yg), ArgumentError);
}

// Layer normalisation over C = 40 (lanes of 16 and a partial one) and C = 128, 100 rows (six
// groups of 16 and a partial one): both backends run the same row formulas and sum the groups in
// the same tree; only the compilers' FMA contraction may differ (an ulp per contracted
// operation), so the rows' values agree to a few ulp (1e-6 of max(1, |v|)) and the parameter
// gradients, sums of 100 such terms, to 1e-6 of their largest element (scaled_error).
TEST_F(Parity, LayerNormForwardAndBackward) {
  for (const int64_t c : {int64_t{40}, int64_t{128}}) {
    const std::string label = "C = " + std::to_string(c);
    const Shape shape{4, 25, c};
    const Tensor x = test::random_tensor(shape, 111, -1.0f, 3.0f), dy = test::random_tensor(shape, 112);
    const Tensor gamma = test::random_tensor(Shape{c}, 113, 0.5f, 1.5f), beta = test::random_tensor(Shape{c}, 114);
    Tensor y = Tensor::empty(shape), dx = Tensor::empty(shape), mean = Tensor::empty(Shape{100});
    Tensor inv = Tensor::empty(Shape{100}), dg = Tensor::empty(Shape{c}), db = Tensor::empty(Shape{c}), scratch;
    cpu::layernorm_forward(x, gamma, beta, 1e-5f, y, mean, inv);
    cpu::layernorm_backward(x, dy, gamma, mean, inv, &dx, dg, db, scratch);
    const Tensor xg = x.to(kGpu), dyg = dy.to(kGpu), gg = gamma.to(kGpu), bg = beta.to(kGpu);
    Tensor yg = nan_on_gpu(shape), dxg = nan_on_gpu(shape), mg = nan_on_gpu(Shape{100}), ig = nan_on_gpu(Shape{100});
    Tensor dgg = nan_on_gpu(Shape{c}), dbg = nan_on_gpu(Shape{c}), scratch_g;
    cuda::layernorm_forward(ctx(), xg, gg, bg, 1e-5f, yg, mg, ig);
    cuda::layernorm_backward(ctx(), xg, dyg, gg, mg, ig, &dxg, dgg, dbg, scratch_g);
    ctx().synchronize();
    EXPECT_LE(rel_error(yg.to_vector(), y.to_vector()), 1e-6) << label;
    EXPECT_LE(rel_error(mg.to_vector(), mean.to_vector()), 1e-6) << label << ": mean";
    EXPECT_LE(rel_error(ig.to_vector(), inv.to_vector()), 1e-6) << label << ": inverse deviation";
    EXPECT_LE(rel_error(dxg.to_vector(), dx.to_vector()), 1e-6) << label << ": dx";
    EXPECT_LE(test::scaled_error(dgg.to_vector(), dg.to_vector()), 1e-6) << label << ": dgamma";
    EXPECT_LE(test::scaled_error(dbg.to_vector(), db.to_vector()), 1e-6) << label << ": dbeta";
  }
}

// Average pooling (own kernels on the GPU, both layouts, any padding; Keras' average: padding
// not counted): VALID tiling, VALID leaving the last row and column out, SAME 2x2/1 on 6x6
// (asymmetric: pads 0 before, 1 after, so the last row's and column's windows hold 2 inputs and
// the corner's 1), overlapping 3x3/2 windows, SAME 3x3/2 on 8x8 (pads 0/1), and one 7x5 window
// (GlobalAvgPool2D's geometry). Both backends add a window's inputs in the same row-major order
// from 0 and multiply by the same rounded 1/count, so the forward should be bit-identical; the
// backward adds the same dy * (1/count) terms to each input in the same output order, but either
// compiler may fuse a product and its sum into an FMA where the other rounds twice (an ulp per
// term, <= 4 terms here). 1e-6 (~8 ulp of 1) covers both and is 1e5x below a wrong divisor.
TEST_F(Parity, AvgPoolForwardAndBackward) {
  Pool2dShape global;
  global.n = 2, global.c = 5, global.h = 7, global.w = 5, global.r = 7, global.s = 5, global.p = 1, global.q = 1;
  const std::vector<std::pair<std::string, Pool2dShape>> cases = {
      {"valid 2x2/2 on 8x6", pool_geometry(8, 6, 2, 2, Padding::Valid)},
      {"valid 2x2/2 on 7x7", pool_geometry(7, 7, 2, 2, Padding::Valid)},
      {"same 2x2/1 on 6x6 (pads 0/1)", pool_geometry(6, 6, 2, 1, Padding::Same)},
      {"valid 3x3/2 on 9x9 (overlapping)", pool_geometry(9, 9, 3, 2, Padding::Valid)},
      {"same 3x3/2 on 8x8 (pads 0/1)", pool_geometry(8, 8, 3, 2, Padding::Same)},
      {"global 7x5", global}};
  for (const bool nhwc : {false, true})
    for (const auto& [label, g] : cases) {
      const Layout act = nhwc ? Layout::NHWC : Layout::RowMajor;
      const std::string what = label + (nhwc ? " (NHWC)" : " (NCHW)");
      const Tensor x = test::random_tensor(Shape{g.n, g.c, g.h, g.w}, 111);
      const Tensor dy = test::random_tensor(Shape{g.n, g.c, g.p, g.q}, 112);
      Tensor y = Tensor::empty(dy.shape(), DType::F32, Device::cpu(), Layout::NHWC);
      Tensor dx = Tensor::empty(x.shape(), DType::F32, Device::cpu(), Layout::NHWC);
      cpu::avgpool2d_forward(g, x.to_layout(Layout::NHWC), y);
      cpu::avgpool2d_backward(g, dy.to_layout(Layout::NHWC), dx);
      const Tensor xg = x.to_layout(act).to(kGpu), dyg = dy.to_layout(act).to(kGpu);
      Tensor yg = nan_on_gpu(dy.shape(), act), dxg = nan_on_gpu(x.shape(), act);
      cuda::avgpool2d_forward(ctx(), g, xg, yg);
      cuda::avgpool2d_backward(ctx(), g, dyg, dxg);
      ctx().synchronize();
      EXPECT_LE(rel_error(yg.to_vector(), y.to_vector()), 1e-6) << what;
      EXPECT_LE(rel_error(dxg.to_vector(), dx.to_vector()), 1e-6) << what;
    }
}

// Every new layer run as a model on the GPU runs it (parameters, gradients and state device
// tensors; the dispatch in layers/ops/ picking the CUDA op and keeping the input's layout, the
// CPU converting to NHWC): two training steps (forward, input and parameter gradients, the state
// after each) and an inference forward match the same layer on the CPU, for NCHW and NHWC 4-D
// input; output gradients come row-major (the dispatch converts them). The ops' arithmetic is
// checked tightly above; 1e-5 (floor 1) here, the loosest of those bounds, still catches a wrong
// layout, a missed conversion or state the device did not update.
TEST_F(Parity, NewLayersOnTheGpuMatchTheirCpuTwins) {
  struct Case {
    std::string label;
    std::function<std::unique_ptr<Layer>()> make;
    Shape sample;
  };
  const std::vector<Case> cases = {
      {"Sigmoid", [] { return std::make_unique<Sigmoid>(); }, Shape{4, 6, 5}},
      {"Tanh", [] { return std::make_unique<Tanh>(); }, Shape{4, 6, 5}},
      {"LeakyReLU", [] { return std::make_unique<LeakyReLU>(0.1f); }, Shape{4, 6, 5}},
      {"GELU", [] { return std::make_unique<GELU>(); }, Shape{4, 6, 5}},
      {"GELU (tanh)", [] { return std::make_unique<GELU>(true); }, Shape{4, 6, 5}},
      {"Dense on (time, features)", [] { return std::make_unique<Dense>(5, Activation::ReLU); }, Shape{4, 6}},
      {"Dense, GELU (tanh)", [] { return std::make_unique<Dense>(5, Activation::GELUTanh); }, Shape{4, 6}},
      {"Conv2D, Sigmoid",
       [] {
         return std::make_unique<Conv2D>(3, Size2{3, 3}, Activation::Sigmoid, Padding::Same);
       },
       Shape{2, 5, 5}},
      {"Softmax", [] { return std::make_unique<Softmax>(); }, Shape{10}},
      {"BatchNormalization", [] { return std::make_unique<BatchNormalization>(0.8f); }, Shape{4, 6, 5}},
      {"BatchNormalization (F,)", [] { return std::make_unique<BatchNormalization>(0.8f); }, Shape{12}},
      {"AvgPool2D 2x2",
       [] {
         return std::make_unique<AvgPool2D>(Size2{2, 2});
       },
       Shape{4, 7, 6}},
      {"AvgPool2D same 2x2/1",
       [] {
         return std::make_unique<AvgPool2D>(Size2{2, 2}, Size2{1, 1}, Padding::Same);
       },
       Shape{3, 6, 6}},
      {"AvgPool2D 3x3/2",
       [] {
         return std::make_unique<AvgPool2D>(Size2{3, 3}, Size2{2, 2});
       },
       Shape{3, 9, 8}},
      {"GlobalAvgPool2D", [] { return std::make_unique<GlobalAvgPool2D>(); }, Shape{5, 7, 6}}};
  for (const Case& c : cases)
    for (const Layout layout : {Layout::RowMajor, Layout::NHWC}) {
      if (layout == Layout::NHWC && c.sample.rank() != 3) continue;
      const std::string label = c.label + (layout == Layout::NHWC ? " (NHWC input)" : "");
      std::unique_ptr<Layer> on_cpu = c.make(), on_gpu = c.make();
      test::build_standalone(*on_cpu, c.sample, 7);
      test::build_standalone(*on_gpu, c.sample, 7);
      move_to_gpu(*on_gpu);
      std::vector<int64_t> dims = {5};
      for (int64_t d : c.sample) dims.push_back(d);
      const Shape batch(dims);
      for (int step = 0; step < 2; ++step) {
        const Tensor x = test::random_tensor(batch, 120 + static_cast<uint64_t>(step), -2.0f, 2.0f).to_layout(layout);
        const Tensor xg = x.to(kGpu);
        const Tensor& yc = on_cpu->forward(x, true);
        const Tensor& yg = on_gpu->forward(xg, true);
        EXPECT_EQ(yg.device(), kGpu) << label;
        if (yg.rank() == 4) {  // Conv2D runs NCHW on a GPU while gpu_nhwc is off; the rest keep the input's layout
          const bool conv = c.label.starts_with("Conv2D");
          EXPECT_EQ(yg.layout(), conv ? Layout::RowMajor : layout) << label;
        }
        EXPECT_LE(rel_error(yg.to_vector(), yc.to_vector()), 1e-5) << label << " step " << step;
        const Tensor dy = test::random_tensor(yc.shape(), 130 + static_cast<uint64_t>(step));
        const std::vector<float> dxc = on_cpu->backward(dy).to_vector();
        EXPECT_LE(rel_error(on_gpu->backward(dy.to(kGpu)).to_vector(), dxc), 1e-5) << label << ": dx";
        for (size_t i = 0; i < on_cpu->grads().size(); ++i)
          EXPECT_LE(rel_error(on_gpu->grads()[i].to_vector(), on_cpu->grads()[i].to_vector()), 1e-5)
              << label << ": gradient " << i;
        for (size_t i = 0; i < on_cpu->state().size(); ++i) {
          EXPECT_EQ(on_gpu->state()[i].device(), kGpu) << label;
          EXPECT_LE(rel_error(on_gpu->state()[i].to_vector(), on_cpu->state()[i].to_vector()), 1e-5)
              << label << ": state " << i << " after step " << step;
        }
      }
      const Tensor x = test::random_tensor(batch, 140, -2.0f, 2.0f).to_layout(layout);
      const Tensor xg = x.to(kGpu);
      EXPECT_LE(rel_error(on_gpu->forward(xg, false).to_vector(), on_cpu->forward(x, false).to_vector()), 1e-5)
          << label << ": inference";
    }
}

// The merge layers on the GPU (layers/cuda/elementwise.cu) against their CPU twins: the same
// float operations in the same order on both devices (a + b, a * b, alpha * x, a copy), so equal
// bit for bit; Maximum with ties, inputs of both layouts (converted to the first's), NaN-filled
// outputs on the device (layers' scratch is ensure()d, so a kernel that wrote nothing shows).
TEST_F(Parity, MergeLayersOnTheGpuEqualTheirCpuTwins) {
  struct Case {
    std::string label;
    std::function<std::unique_ptr<Layer>()> make;
    std::vector<Shape> samples;
  };
  const Shape s{4, 6, 5};
  const std::vector<Case> cases = {
      {"Add", [] { return std::make_unique<Add>(); }, {s, s, s}},
      {"Subtract", [] { return std::make_unique<Subtract>(); }, {s, s}},
      {"Multiply", [] { return std::make_unique<Multiply>(); }, {s, s, s}},
      {"Average", [] { return std::make_unique<Average>(); }, {s, s, s}},
      {"Maximum", [] { return std::make_unique<Maximum>(); }, {s, s, s}},
      {"Concatenate channels", [] { return std::make_unique<Concatenate>(1); }, {s, Shape{2, 6, 5}}},
      {"Concatenate last", [] { return std::make_unique<Concatenate>(-1); }, {s, Shape{4, 6, 3}}},
      {"Concatenate features", [] { return std::make_unique<Concatenate>(); }, {Shape{7}, Shape{3}}}};
  for (const Case& c : cases)
    for (const Layout first : {Layout::RowMajor, Layout::NHWC}) {
      if (first == Layout::NHWC && c.samples[0].rank() != 3) continue;
      const std::string label = c.label + (first == Layout::NHWC ? " (first input NHWC)" : "");
      std::unique_ptr<Layer> on_cpu = c.make(), on_gpu = c.make();
      on_cpu->build_inputs(c.samples);
      on_gpu->build_inputs(c.samples);
      std::vector<Tensor> xs, xgs;
      for (size_t i = 0; i < c.samples.size(); ++i) {
        // Values on a grid of quarters in [-2, 2]: Maximum meets ties.
        Tensor x = test::random_tensor(c.samples[i].with_batch(3), 150 + i, -2.0f, 2.0f);
        for (int64_t k = 0; k < x.numel(); ++k) x.f32()[k] = std::round(x.f32()[k] * 4.0f) / 4.0f;
        xs.push_back(i == 0 ? x.to_layout(first) : x);
        xgs.push_back(xs.back().to(kGpu));
      }
      std::vector<const Tensor*> pc, pg;
      for (size_t i = 0; i < xs.size(); ++i) {
        pc.push_back(&xs[i]);
        pg.push_back(&xgs[i]);
      }
      const Tensor& yc = on_cpu->forward_inputs(pc, true);
      const Tensor& yg = on_gpu->forward_inputs(pg, true);
      EXPECT_EQ(yg.device(), kGpu) << label;
      EXPECT_EQ(yg.to_vector(), yc.to_vector()) << label;
      const Tensor dy = test::random_tensor(yc.shape(), 160);
      const std::vector<Tensor>& dxc = on_cpu->backward_inputs(dy);
      const std::vector<Tensor>& dxg = on_gpu->backward_inputs(dy.to(kGpu));
      ASSERT_EQ(dxg.size(), dxc.size()) << label;
      for (size_t i = 0; i < dxc.size(); ++i) EXPECT_EQ(dxg[i].to_vector(), dxc[i].to_vector()) << label << ": dx" << i;
    }
}

}  // namespace
}  // namespace ember
