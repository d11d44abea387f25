// CPU-vs-GPU parity of every GPU op, forward and backward, on seeded random inputs. Outputs are
// pre-filled with NaN on the device, so an op that writes nothing fails. Skips, saying why,
// without a usable GPU (CI here); scripts/gpu_check.sh runs it on a lent GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <tuple>
#include <vector>

#include "core/cuda/elementwise.h"
#include "data/cuda/gather.h"
#include "data/dataset.h"
#include "layers/activation.h"
#include "layers/cpu/conv2d.h"
#include "layers/cpu/dense.h"
#include "layers/cpu/maxpool2d.h"
#include "layers/cpu/relu.h"
#include "layers/cpu/softmax_xent.h"
#include "layers/cuda/conv2d.h"
#include "layers/cuda/dense.h"
#include "layers/cuda/maxpool2d.h"
#include "layers/cuda/relu.h"
#include "layers/cuda/softmax_xent.h"
#include "layers/loss.h"
#include "optim/adam.h"
#include "optim/cpu/adam.h"
#include "optim/cuda/adam.h"
#include "optim/cuda/sgd.h"
#include "optim/sgd.h"
#include "test_util.h"

namespace ember {
namespace {

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
};

// Max |a - b| / max(1, |b|); NaN anywhere counts as infinite.
double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return std::numeric_limits<double>::infinity();
    worst = std::max(worst, std::abs(double(a[i]) - b[i]) / std::max(1.0, std::abs(double(b[i]))));
  }
  return worst;
}

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
  cpu::softmax_xent_backward(p, y, d);
  const Tensor zg = z.to(kGpu), yg = y.to(kGpu);
  Tensor pg = nan_on_gpu(z.shape()), dg = nan_on_gpu(z.shape());
  const float loss_g = cuda::softmax_xent_forward(ctx(), zg, yg, pg);
  cuda::softmax_xent_backward(ctx(), pg, yg, dg);
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
  cuda::gather_batch(ctx(), images.to(kGpu), lab.to(kGpu), order_g, 1, 5, 3, xg, yg);
  ctx().synchronize();
  EXPECT_EQ(xg.to_vector(), xc.to_vector());  // the same float product: bit-exact
  const Tensor yh = yg.to(Device::cpu());
  EXPECT_TRUE(std::equal(yh.data<int32_t>(), yh.data<int32_t>() + 5, yc.data<int32_t>()));
  EXPECT_EQ(order_g.to(Device::cpu()).data<int32_t>()[order.size()], 4);
  // A second gather reads from the advanced cursor: rows 4..5 of the order.
  Tensor x2 = nan_on_gpu(Shape{2, 1, 5, 3}), y2 = Tensor::zeros(Shape{2}, DType::I32, kGpu);
  cuda::gather_batch(ctx(), images.to(kGpu), lab.to(kGpu), order_g, 0, 2, 0, x2, y2);
  Tensor x2c, y2c;
  ds.gather(std::span<const int64_t>(order.data() + 4, 2), x2c, y2c);
  EXPECT_EQ(x2.to_vector(), x2c.to_vector());
  // Rows the order cannot hold are refused on the host.
  EXPECT_THROW(cuda::gather_batch(ctx(), images.to(kGpu), lab.to(kGpu), order_g, 4, 5, 0, xg, yg), ShapeError);
}

TEST_F(Parity, DenseForwardAndBackwardWithRelu) {
  // Fewer columns than a column-sum block (29 < 32), rows not a multiple of its 16 thread rows;
  // then a batch of 1024 over 70 outputs (3 blocks, the last partial).
  for (const auto& [n, in, out] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{37, 131, 29}, {1024, 64, 70}, {70001, 3, 5}}) {
    const Tensor x = test::random_tensor(Shape{n, in}, 5), w = test::random_tensor(Shape{out, in}, 6, -0.2f, 0.2f),
                 b = test::random_tensor(Shape{out}, 7);
    Tensor y = Tensor::empty(Shape{n, out}), dy = test::random_tensor(Shape{n, out}, 8);
    Tensor dx = Tensor::empty(x.shape()), dw = Tensor::empty(w.shape()), db = Tensor::empty(b.shape());
    Tensor dz = Tensor::empty(dy.shape());
    cpu::dense_forward(x, w, b, true, y);
    cpu::dense_backward(x, w, y, dy, true, dz, &dx, dw, db);

    const Tensor xg = x.to(kGpu), wg = w.to(kGpu), bg = b.to(kGpu);
    Tensor yg = nan_on_gpu(y.shape()), dxg = nan_on_gpu(x.shape()), dwg = nan_on_gpu(w.shape()),
           dbg = nan_on_gpu(b.shape()), dzg = nan_on_gpu(dy.shape());
    const Tensor dyg = dy.to(kGpu);
    cuda::dense_forward(ctx(), xg, wg, bg, true, yg);
    cuda::dense_backward(ctx(), xg, wg, yg, dyg, true, dzg, &dxg, dwg, dbg);
    ctx().synchronize();
    // Sums of up to 131 products, or 1024 rows, in another order (cuBLAS vs oneDNN, a tree vs a
    // loop): ~1e-6 relative; 1e-5 is far below a transposed operand or a missing bias (O(1)).
    EXPECT_LE(rel_error(yg.to_vector(), y.to_vector()), 1e-5) << n;
    EXPECT_LE(rel_error(dxg.to_vector(), dx.to_vector()), 1e-5) << n;
    EXPECT_LE(rel_error(dwg.to_vector(), dw.to_vector()), 1e-5) << n;
    EXPECT_LE(rel_error(dbg.to_vector(), db.to_vector()), 1e-5) << n;
    EXPECT_EQ(dzg.to_vector(), dz.to_vector()) << n;  // a mask: exact
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
      cuda::conv2d_forward(ctx(), g, xg, wg, bg, yg);
      cuda::conv2d_backward(ctx(), g, xg, wg, yg, dyg, &dxg, dwg, dbg, false);
      ctx().synchronize();
      // Sums of <= 36 products (forward, dx) or 3*9*8 = 216 (dw, db) in other orders, and cuDNN
      // may pick FFT/Winograd: 1e-4 relative is still 1000x below a wrong index or a lost bias.
      EXPECT_LE(rel_error(yg.to_vector(), y.to_vector()), 1e-4) << label << ", " << mode;
      EXPECT_LE(rel_error(dxg.to_vector(), dx.to_vector()), 1e-4) << label;
      EXPECT_LE(rel_error(dwg.to_vector(), dw.to_vector()), 1e-4) << label;
      EXPECT_LE(rel_error(dbg.to_vector(), db.to_vector()), 1e-4) << label;
      const std::string info = cuda::conv2d_kernel_info(ctx(), g);
      EXPECT_NE(info.find(nhwc ? "NHWC" : "NCHW"), std::string::npos) << label << ", " << mode << ": " << info;
      if (fused) {
        EXPECT_NE(info.find("forward fused"), std::string::npos) << label << ": " << info;
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
                                    nan_on_gpu(Shape{asym.k}), ya),
               ShapeError);
}

// Deterministic mode picks algorithms that say so (or fails naming the shape): two backward
// passes give the same bits, and the plan reports all three as deterministic.
TEST_F(Parity, DeterministicConvolutionsGiveTheSameBitsTwice) {
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
    cuda::conv2d_forward(ctx(), g, x, w, b, y);
    cuda::conv2d_backward(ctx(), g, x, w, y, dy, &dx, dw, db, false);
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
  set_gpu_deterministic(false);
}

// 2x2/2 tiling; VALID that leaves the last row/column out; SAME 3x3/1 (cuDNN pads 1); SAME
// 2x2/2 on an odd input (one more at the bottom/right: -inf padding on the GPU).
TEST_F(Parity, MaxPoolForwardAndBackwardWithFusedRelu) {
  const std::vector<std::pair<std::string, Pool2dShape>> cases = {
      {"2x2/2 on 8x6", pool_geometry(8, 6, 2, 2, Padding::Valid)},
      {"valid 2x2/2 on 7x7", pool_geometry(7, 7, 2, 2, Padding::Valid)},
      {"same 3x3/1 on 6x6", pool_geometry(6, 6, 3, 1, Padding::Same)},
      {"same 2x2/2 on 7x5", pool_geometry(7, 5, 2, 2, Padding::Same)}};
  for (const bool nhwc : {false, true})
    for (const auto& [label, g] : cases) {
      if (nhwc && label.starts_with("same 2x2/2")) continue;  // explicit padding: NCHW only
      const Layout act = nhwc ? Layout::NHWC : Layout::RowMajor;
      Tensor x = test::random_tensor(Shape{g.n, g.c, g.h, g.w}, 31);
      const Tensor dy = test::random_tensor(Shape{g.n, g.c, g.p, g.q}, 32);
      const Tensor xn = x.to_layout(Layout::NHWC), dyn = dy.to_layout(Layout::NHWC);
      Tensor y = Tensor::empty(dy.shape(), DType::F32, Device::cpu(), Layout::NHWC);
      Tensor am = Tensor::empty(dy.shape(), DType::I32, Device::cpu(), Layout::NHWC);
      Tensor dx = Tensor::empty(x.shape(), DType::F32, Device::cpu(), Layout::NHWC);
      cpu::maxpool2d_forward(g, xn, y, &am);
      cpu::maxpool2d_backward(g, xn, y, dyn, &am, dx, true);  // ReLU fused: x plays the ReLU's output

      const Tensor xg = x.to_layout(act).to(kGpu), dyg = dy.to_layout(act).to(kGpu);
      Tensor yg = nan_on_gpu(dy.shape(), act), dxg = nan_on_gpu(x.shape(), act);
      cuda::maxpool2d_forward(ctx(), g, xg, yg, nullptr);
      cuda::maxpool2d_backward(ctx(), g, xg, yg, dyg, nullptr, dxg, true);
      ctx().synchronize();
      EXPECT_EQ(yg.to_vector(), y.to_vector()) << label << (nhwc ? " (NHWC)" : "");  // a max selects: exact
      // Routing and masking: exact. Overlapping windows (3x3/1) add several dy into one dx in
      // an order that may differ: 1e-6 there.
      EXPECT_LE(rel_error(dxg.to_vector(), dx.to_vector()), g.stride_h < g.r ? 1e-6 : 0.0) << label;
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

}  // namespace
}  // namespace ember
