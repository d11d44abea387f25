// The one-thread advances folded into their neighbours (set_fused_advance; docs/plans/
// gpu-fewer-launches.md, 2c): with set_fused_advance(true) the data loader's cursor, Adam's
// {t, lr_t} and a Dropout layer's step counter are advanced by the last block of the kernel that
// reads them, not by a kernel of one thread. Each test runs one sequence with the switch off and
// then on and compares every result bit for bit: the fold may change the number of launches and
// nothing else. The grids have hundreds of blocks, so a block that read a counter after the last
// block had advanced it would show as another batch, step size or mask. Skips, saying why,
// without a usable GPU (scripts/gpu_check.sh runs it on a machine with one).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "core/runtime.h"
#include "data/cuda/gather.h"
#include "layers/cuda/dropout.h"
#include "layers/dropout.h"
#include "layers/random_bits.h"
#include "optim/adam.h"
#include "optim/cuda/adam.h"
#include "test_util.h"

namespace ember {
namespace {

const Device kGpu = Device::cuda(0);

// Puts the switch back as the test found it (off by default), whatever the test set.
struct FusedAdvanceRestore {
  const bool saved = fused_advance();
  ~FusedAdvanceRestore() { set_fused_advance(saved); }
};

class FoldedAdvances : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no usable GPU: " << cuda_status().reason;
  }
  cuda::Context& ctx() { return cuda::context(0); }
  FusedAdvanceRestore restore_;
};

// Every byte of `t` as its device holds it (the copy to the host waits for the queued work).
std::vector<uint8_t> bytes(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  const auto* b = static_cast<const uint8_t*>(h.raw());
  return std::vector<uint8_t>(b, b + h.nbytes());
}

// The first byte at which two images differ, or -1 when they are the same, sizes included: a
// failing EXPECT_EQ(..., -1) names the byte instead of printing megabytes.
int64_t first_difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  if (a.size() != b.size()) return static_cast<int64_t>(std::min(a.size(), b.size()));
  const auto it = std::mismatch(a.begin(), a.end(), b.begin()).first;
  return it == a.end() ? -1 : static_cast<int64_t>(it - a.begin());
}

// What one run recorded, in order, with a name for each record.
struct Records {
  std::vector<std::string> names;
  std::vector<std::vector<uint8_t>> images;
  void add(const std::string& name, const Tensor& t) {
    names.push_back(name);
    images.push_back(bytes(t));
  }
};

// The run with the switch on must have recorded exactly the run with it off.
void expect_same(const Records& on, const Records& off, const std::string& label) {
  ASSERT_EQ(on.names, off.names) << label;
  for (size_t i = 0; i < off.images.size(); ++i)
    EXPECT_EQ(first_difference(on.images[i], off.images[i]), -1) << label << ": " << off.names[i];
}

Tensor doubles_on_gpu(double a, double b) {
  Tensor h = Tensor::empty(Shape{2}, DType::F64, Device::cpu());
  h.data<double>()[0] = a;
  h.data<double>()[1] = b;
  return h.to(kGpu);
}

Tensor float_on_gpu(float value) { return Tensor::from_vector(Shape{1}, std::vector<float>{value}).to(kGpu); }

float* f32(Tensor& t) { return static_cast<float*>(t.raw()); }
const float* cf32(const Tensor& t) { return static_cast<const float*>(t.raw()); }

// Adam's element counts: one element (one block), 100003 (391 blocks, the last partial) and
// 2048 x 256 x 3 + 5 (the capped grid of 2048 blocks, each looping 3 or 4 times).
const std::vector<int64_t> kAdamSizes = {1, 100003, int64_t{2048} * 256 * 3 + 5};

// The two kernels and the folded one called directly: the parameters, m, v and the device's
// {t, lr_t} after each of four steps. Step 3 restarts the count at 1000 (as a restored checkpoint
// uploads it) and step 4 changes the learning rate on the device (as a schedule does), so both
// inputs of the step size are read in every block. n == 0 has no update kernel: the fold falls
// back to adam_advance, and {t, lr_t} still advance.
TEST_F(FoldedAdvances, AdamUpdateAdvanceEqualsAdvanceThenUpdate) {
  const float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-7f;
  std::vector<int64_t> sizes = {0};
  sizes.insert(sizes.end(), kAdamSizes.begin(), kAdamSizes.end());
  for (const int64_t n : sizes) {
    Records seen[2];
    for (const int fused : {0, 1}) {
      Tensor p = test::random_tensor(Shape{n}, 3).to(kGpu);
      Tensor m = Tensor::zeros(Shape{n}, DType::F32, kGpu), v = Tensor::zeros(Shape{n}, DType::F32, kGpu);
      Tensor scalars = doubles_on_gpu(0.0, 0.0), rate = float_on_gpu(1e-3f);
      for (int step = 1; step <= 4; ++step) {
        if (step == 3) scalars = doubles_on_gpu(1000.0, 0.0);
        if (step == 4) rate = float_on_gpu(3e-4f);
        const Tensor g = test::random_tensor(Shape{n}, 10 + static_cast<uint64_t>(step)).to(kGpu);
        auto* s = static_cast<double*>(scalars.raw());
        if (fused) {
          cuda::adam_update_advance(ctx(), f32(p), cf32(g), f32(m), f32(v), n, s, cf32(rate), beta1, beta2, epsilon);
        } else {
          cuda::adam_advance(ctx(), s, cf32(rate), beta1, beta2);
          cuda::adam_update(ctx(), f32(p), cf32(g), f32(m), f32(v), n, s, beta1, beta2, epsilon);
        }
        const std::string at = " after step " + std::to_string(step);
        seen[fused].add("{t, lr_t}" + at, scalars);
        seen[fused].add("p" + at, p);
        seen[fused].add("m" + at, m);
        seen[fused].add("v" + at, v);
      }
      const Tensor h = scalars.to(Device::cpu());
      EXPECT_EQ(h.data<double>()[0], 1002.0) << "n " << n << (fused ? " folded" : "");
      EXPECT_GT(h.data<double>()[1], 0.0) << "n " << n << (fused ? " folded" : "");
    }
    expect_same(seen[1], seen[0], "n " + std::to_string(n));
  }
}

// The optimizer itself (optim/adam.cpp reads the switch): four steps as
// Parity.AdamMatchesTheCpuLoop takes them, the count restored to 1000 before the third.
TEST_F(FoldedAdvances, AdamStepsGiveTheSameBitsWithTheSwitchOn) {
  for (const int64_t n : kAdamSizes) {
    Records seen[2];
    for (const int fused : {0, 1}) {
      set_fused_advance(fused != 0);
      Tensor p = test::random_tensor(Shape{n}, 3).to(kGpu);
      Adam adam;
      for (int step = 1; step <= 4; ++step) {
        if (step == 3) adam.set_iterations(1000);  // as a resumed checkpoint does
        const Tensor g = test::random_tensor(Shape{n}, 10 + static_cast<uint64_t>(step)).to(kGpu);
        adam.step(p, g);
        const std::string at = " after step " + std::to_string(step);
        seen[fused].add("p" + at, p);
        for (const auto& [name, t] : adam.state()) seen[fused].add(name + at, t);
      }
      EXPECT_EQ(adam.iterations(), 1002) << "n " << n;
    }
    expect_same(seen[1], seen[0], "n " + std::to_string(n));
  }
}

// One gather_batch call: rows shard_offset .. shard_offset + count past the cursor, which then
// moves on by `advance`.
struct GatherCall {
  int64_t shard_offset, count, advance;
};

// The order as the loader keeps it on the device: the indices, then the cursor.
Tensor order_on_gpu(const std::vector<int32_t>& order, int32_t cursor) {
  Tensor h = Tensor::empty(Shape{static_cast<int64_t>(order.size()) + 1}, DType::I32);
  std::copy(order.begin(), order.end(), h.data<int32_t>());
  h.data<int32_t>()[order.size()] = cursor;
  return h.to(kGpu);
}

// A permutation of [0, n): i * step mod n, for a step prime to n.
std::vector<int32_t> permutation(int32_t n, int32_t step) {
  std::vector<int32_t> order(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>((int64_t{i} * step + 17) % n);
  return order;
}

// `calls` from a fresh order whose cursor is `start`, with the switch as set: x and y of every
// call (x starts as NaN, y as 0, so an element no kernel wrote shows) and the whole order after
// each (the cursor, and the indices untouched). Undefined features or targets: that part is
// neither gathered nor recorded, as gather_batch does for a model's further inputs and outputs.
Records run_gathers(const Tensor& features, const Tensor& targets, float scale, const std::vector<int32_t>& order,
                    int32_t start, const std::vector<GatherCall>& calls, const std::string& label) {
  Records r;
  Tensor order_g = order_on_gpu(order, start);
  int64_t cursor = start;
  for (size_t k = 0; k < calls.size(); ++k) {
    const GatherCall& c = calls[k];
    Tensor x, y;
    if (features.defined()) {
      x = Tensor::empty(features.shape().without_batch().with_batch(c.count), DType::F32, kGpu);
      x.fill(std::numeric_limits<float>::quiet_NaN());
    }
    if (targets.defined()) {
      y = Tensor::empty(targets.shape().without_batch().with_batch(c.count), targets.dtype(), kGpu);
      y.zero();
    }
    cuda::gather_batch(cuda::context(0), features, targets, scale, order_g, c.shard_offset, c.count, c.advance, x, y);
    const std::string at = " of call " + std::to_string(k);
    if (features.defined()) r.add("x" + at, x);
    if (targets.defined()) r.add("y" + at, y);
    r.add("order and cursor after call " + std::to_string(k), order_g);
    cursor += c.advance;
  }
  const Tensor h = order_g.to(Device::cpu());
  EXPECT_EQ(h.data<int32_t>()[order.size()], cursor) << label << ": the cursor after " << calls.size() << " calls";
  return r;
}

void expect_gathers_unchanged_by_the_switch(const Tensor& features, const Tensor& targets, float scale,
                                            const std::vector<int32_t>& order, int32_t start,
                                            const std::vector<GatherCall>& calls, const std::string& label) {
  set_fused_advance(false);
  const Records off = run_gathers(features, targets, scale, order, start, calls, label);
  set_fused_advance(true);
  const Records on = run_gathers(features, targets, scale, order, start, calls, label + " folded");
  expect_same(on, off, label);
}

TEST_F(FoldedAdvances, GatherAdvancesTheCursorAsTheOneThreadKernelDoes) {
  // Parity.GatherFromADeviceDatasetEqualsTheCpuGather's data and calls (one block each), then one
  // more that advances again.
  {
    const int64_t n = 50;
    Tensor images = Tensor::empty(Shape{n, 1, 5, 3}, DType::U8), lab = Tensor::empty(Shape{n}, DType::I32);
    for (int64_t i = 0; i < images.numel(); ++i) images.data<uint8_t>()[i] = static_cast<uint8_t>((i * 37) % 256);
    for (int64_t i = 0; i < n; ++i) lab.data<int32_t>()[i] = static_cast<int32_t>(i % 10);
    const std::vector<int32_t> order = {49, 0, 7, 7, 23, 1, 48, 12};
    expect_gathers_unchanged_by_the_switch(images.to(kGpu), lab.to(kGpu), 1.0f / 255.0f, order, 1,
                                           {{1, 5, 3}, {0, 2, 0}, {0, 2, 2}}, "parity's sequence");
    // No rows to gather: no kernel to fold into, the one-thread kernel advances either way.
    expect_gathers_unchanged_by_the_switch(images.to(kGpu), lab.to(kGpu), 1.0f / 255.0f, order, 1,
                                           {{0, 0, 3}, {1, 0, 2}, {0, 2, 1}}, "count 0");
  }
  // MNIST-sized u8 images: 784 blocks for a batch of 256. A whole epoch's batches, then a shard
  // of a two-replica step (rows 128..255 past the cursor, advancing by the global batch), then
  // calls that gather without advancing and advance by another count than they gather.
  {
    const int32_t n = 3000;
    Tensor images = Tensor::empty(Shape{n, 1, 28, 28}, DType::U8), lab = Tensor::empty(Shape{n}, DType::I32);
    for (int64_t i = 0; i < images.numel(); ++i) images.data<uint8_t>()[i] = static_cast<uint8_t>((i * 37 + 11) % 251);
    for (int32_t i = 0; i < n; ++i) lab.data<int32_t>()[i] = i % 10;
    const std::vector<int32_t> order = permutation(n, 1103);
    std::vector<GatherCall> calls(10, GatherCall{0, 256, 256});
    calls.push_back({128, 128, 256});
    calls.push_back({64, 100, 0});
    calls.push_back({0, 64, 150});
    const Tensor images_g = images.to(kGpu), lab_g = lab.to(kGpu);
    expect_gathers_unchanged_by_the_switch(images_g, lab_g, 1.0f / 255.0f, order, 0, calls, "u8 images");
    // The features alone (a model's further input): the feature kernel, no target words.
    expect_gathers_unchanged_by_the_switch(images_g, Tensor(), 1.0f / 255.0f, order, 0, calls, "features alone");
  }
  // Targets wider than the features (an autoencoder's kind): the feature kernel (6 blocks) and
  // then the target kernel (73 blocks), which reads the cursor after the first and so is the one
  // that advances it; then the targets alone (a model's further output: the target kernel only).
  {
    const int32_t n = 2000;
    const Tensor f = test::random_tensor(Shape{n, 3}, 4).to(kGpu), t = test::random_tensor(Shape{n, 40}, 5).to(kGpu);
    const std::vector<int32_t> order = permutation(n, 997);
    const std::vector<GatherCall> calls = {{0, 500, 500}, {0, 500, 500}, {250, 250, 500}, {0, 100, 0}};
    expect_gathers_unchanged_by_the_switch(f, t, 0.5f, order, 0, calls, "wide targets");
    expect_gathers_unchanged_by_the_switch(Tensor(), t, 1.0f, order, 0, calls, "targets alone");
  }
}

// Dropout's constants as Parity.DropoutMasksAreBitIdenticalInBothLayouts has them.
detail::DropoutParams dropout_params(float rate) {
  return detail::DropoutParams{.seed = 0x5EEDF00Dull,
                               .threshold = static_cast<uint32_t>(std::ceil(double(rate) * detail::kCounterBase)),
                               .scale = 1.0f / (1.0f - rate)};
}

// A counter two steps before lo wraps ([lo, hi] = [2^24 - 2, 5]): three steps read 2^24 - 2 and
// 2^24 - 1, carry into hi, and read [0, 6]; the counter then holds [1, 6].
Tensor counter_near_the_wrap() {
  return Tensor::from_vector(Shape{2}, std::vector<float>{detail::kCounterBase - 2.0f, 5.0f}).to(kGpu);
}

// The forward then dropout_advance, against the forward that advances (called directly), in
// both layouts: more elements than the capped grid (4096 x 256) covers in one pass, one block,
// and no elements at all (no kernel to fold into: dropout_advance runs either way).
TEST_F(FoldedAdvances, DropoutForwardThatAdvancesEqualsForwardThenAdvance) {
  const detail::DropoutParams p = dropout_params(0.4f);
  const std::vector<std::pair<Shape, Layout>> inputs = {{Shape{3, 7, 229, 231}, Layout::RowMajor},
                                                        {Shape{3, 7, 229, 231}, Layout::NHWC},
                                                        {Shape{4, 50}, Layout::RowMajor},
                                                        {Shape{0, 50}, Layout::RowMajor}};
  for (const auto& [shape, layout] : inputs) {
    const std::string label = shape.str() + (layout == Layout::NHWC ? " NHWC" : "");
    const Tensor x = test::random_tensor(shape, 71, 0.5f, 1.5f).to_layout(layout).to(kGpu);
    Records seen[2];
    for (const int fused : {0, 1}) {
      Tensor counter = counter_near_the_wrap();
      for (int step = 0; step < 3; ++step) {
        Tensor y = Tensor::empty(shape, DType::F32, kGpu, layout), mask = Tensor::empty(shape, DType::U8, kGpu, layout);
        y.fill(std::numeric_limits<float>::quiet_NaN());
        mask.zero();
        if (fused) {
          cuda::dropout_forward(ctx(), p, counter, x, y, mask, true);
        } else {
          cuda::dropout_forward(ctx(), p, counter, x, y, mask);
          cuda::dropout_advance(ctx(), counter);
        }
        const std::string at = " of step " + std::to_string(step);
        seen[fused].add("output" + at, y);
        seen[fused].add("mask" + at, mask);
        seen[fused].add("counter after step " + std::to_string(step), counter);
      }
      EXPECT_EQ(counter.to_vector(), (std::vector<float>{1.0f, 6.0f})) << label << (fused ? " folded" : "");
    }
    expect_same(seen[1], seen[0], label);
  }
}

// The Dropout layer on the GPU (layers/ops/dropout.cpp reads the switch), its counter near the
// wrap: three training steps' outputs and input gradients (the mask) and the counter, for NCHW
// and NHWC 4-D input, a batch of (N, F) rows, and one big enough for the capped grid.
TEST_F(FoldedAdvances, DropoutLayerGivesTheSameBitsWithTheSwitchOn) {
  const std::vector<std::pair<Shape, Layout>> inputs = {{Shape{4, 6, 5, 7}, Layout::RowMajor},
                                                        {Shape{4, 6, 5, 7}, Layout::NHWC},
                                                        {Shape{8, 90}, Layout::RowMajor},
                                                        {Shape{64, 32, 28, 28}, Layout::NHWC}};
  for (const auto& [shape, layout] : inputs) {
    const std::string label = shape.str() + (layout == Layout::NHWC ? " NHWC" : "");
    Records seen[2];
    for (const int fused : {0, 1}) {
      set_fused_advance(fused != 0);
      Dropout layer(0.5f);
      test::build_standalone(layer, shape.without_batch(), 11);
      // Its state on the GPU, as a model's there: the counter (its one state tensor) near the wrap.
      ASSERT_EQ(layer.state().size(), 1u) << label;
      layer.bind_state({counter_near_the_wrap()});
      ASSERT_EQ(layer.state()[0].device(), kGpu) << label;
      for (int step = 0; step < 3; ++step) {
        const uint64_t k = static_cast<uint64_t>(step);
        const Tensor x = test::random_tensor(shape, 80 + k, 0.5f, 1.5f).to_layout(layout).to(kGpu);
        const Tensor dy = test::random_tensor(shape, 90 + k).to(kGpu);
        const std::string at = " of step " + std::to_string(step);
        seen[fused].add("output" + at, layer.forward(x, true));
        seen[fused].add("input gradient" + at, layer.backward(dy));
        seen[fused].add("counter after step " + std::to_string(step), layer.state()[0]);
      }
      EXPECT_EQ(layer.state()[0].to_vector(), (std::vector<float>{1.0f, 6.0f})) << label << (fused ? " folded" : "");
    }
    expect_same(seen[1], seen[0], label);
  }
}

}  // namespace
}  // namespace ember
