// Tensors on a GPU (through the CUDA module): bit-exact copies both ways, device-to-device,
// host access refused, the caching allocator's reuse and cap; and, without a usable GPU, one
// clear DeviceError for every device operation. The GPU tests skip, saying why, on machines
// without one; scripts/gpu_check.sh runs them on a machine with a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "test_util.h"

namespace ember {
namespace {

TEST(CudaTensor, WithoutAGpuEveryDeviceOperationSaysWhy) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is usable here: the no-GPU messages cannot be produced";
  const std::string reason = cuda_status().reason;
  ASSERT_FALSE(reason.empty());
  try {
    Tensor::empty(Shape{4}, DType::F32, Device::cuda(0));
    FAIL();
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tensor::zeros(Shape{4}).to(Device::cuda(0)), DeviceError);
  EXPECT_THROW(set_gpu_memory_fraction(0, 0.5), DeviceError);
  EXPECT_THROW(set_gpu_memory_policy(0, MemoryPolicy::limit("1GiB")), DeviceError);
  // A data loader asked to build its batches on the GPU, and a metrics accumulator there.
  Tensor images = Tensor::zeros(Shape{4, 1, 2, 2}, DType::U8), labels = Tensor::zeros(Shape{4}, DType::I32);
  const Dataset ds(images, labels, 10);
  EXPECT_THROW(DataLoader(ds, {.batch_size = 2, .device = Device::cuda(0)}), DeviceError);
  EXPECT_THROW(MetricSums{Device::cuda(0)}, DeviceError);
}

class OnGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!cuda_available()) GTEST_SKIP() << "no usable GPU: " << cuda_status().reason;
    set_allow_tf32(false);  // compared with the CPU: FP32 math (TF32 is on by default)
  }
};

// zeros and fill are queued on the stream (a memset, a fill kernel): no upload, no host wait; f64
// (MetricSums' buffer) fills too.
TEST_F(OnGpu, ZerosAndFillsQueueWithoutAHostWait) {
  const Device gpu = Device::cuda(0);
  synchronize(gpu);
  const int64_t before = gpu_host_syncs(gpu);
  Tensor z = Tensor::zeros(Shape{1000}, DType::F64, gpu);
  Tensor f = Tensor::zeros(Shape{3, 333}, DType::F32, gpu);
  Tensor n = Tensor::empty(Shape{5}, DType::F64, gpu);
  n.fill(std::numeric_limits<float>::quiet_NaN());
  f.fill(2.5f);
  EXPECT_EQ(gpu_host_syncs(gpu), before);
  const Tensor zh = z.to(Device::cpu()), fh = f.to(Device::cpu()), nh = n.to(Device::cpu());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(zh.data<double>()[i], 0.0);
  for (int64_t i = 0; i < 999; ++i) ASSERT_EQ(fh.f32()[i], 2.5f);
  for (int64_t i = 0; i < 5; ++i) EXPECT_TRUE(std::isnan(nh.data<double>()[i]));
  Tensor ints = Tensor::zeros(Shape{4}, DType::I32, gpu);
  EXPECT_THROW(ints.fill(1.0f), ArgumentError);
}

TEST_F(OnGpu, RoundTripsAreBitExactForEveryDtypeAndLayout) {
  const Tensor f = test::random_tensor(Shape{3, 5, 7, 2}, 1).to_layout(Layout::NHWC);
  const Tensor g = f.to(Device::cuda(0));
  EXPECT_EQ(g.device(), Device::cuda(0));
  EXPECT_EQ(g.layout(), Layout::NHWC);
  EXPECT_THROW(g.f32(), DeviceError);  // host access to device memory is refused, not a crash
  const Tensor back = g.to(Device::cpu());
  EXPECT_EQ(back.to_vector(), f.to_vector());
  EXPECT_EQ(g.to_vector(), f.to_vector());
  const Tensor g2 = g.to(Device::cuda(0));  // device to device
  EXPECT_NE(g2.raw(), g.raw());
  EXPECT_EQ(g2.to_vector(), f.to_vector());

  Tensor ints = Tensor::empty(Shape{1000}, DType::I32);
  Tensor bytes = Tensor::empty(Shape{1001}, DType::U8);
  for (int i = 0; i < 1000; ++i) ints.data<int32_t>()[i] = i * 7919 - 3000000;
  for (int i = 0; i < 1001; ++i) bytes.data<uint8_t>()[i] = static_cast<uint8_t>(i * 31);
  const Tensor ib = ints.to(Device::cuda(0)).to(Device::cpu()), bb = bytes.to(Device::cuda(0)).to(Device::cpu());
  EXPECT_EQ(std::memcmp(ib.raw(), ints.raw(), ints.nbytes()), 0);
  EXPECT_EQ(std::memcmp(bb.raw(), bytes.raw(), bytes.nbytes()), 0);

  const Tensor z = Tensor::zeros(Shape{257}, DType::F32, Device::cuda(0));
  for (float v : z.to_vector()) ASSERT_EQ(v, 0.0f);
  Tensor dst = Tensor::empty(Shape{3, 5, 7, 2}, DType::F32, Device::cuda(0), Layout::NHWC);
  dst.copy_from(f);  // host to device, same layout
  EXPECT_EQ(dst.to_vector(), f.to_vector());
}

// Measured against what was in use before: an earlier test may hold blocks for good (the first
// cuBLAS use keeps its workspace), so nothing here depends on the tests' order.
TEST_F(OnGpu, TheAllocatorReusesFreedBlocks) {
  const auto before = gpu_memory_stats(0);
  for (int i = 0; i < 5; ++i) Tensor::empty(Shape{1 << 18}, DType::F32, Device::cuda(0));  // 1 MiB each, freed
  const auto after = gpu_memory_stats(0);
  EXPECT_LE(after.raw_allocs - before.raw_allocs, 1u);
  EXPECT_GE(after.cache_hits - before.cache_hits, 4u);
  EXPECT_EQ(after.in_use, before.in_use);
}

// The cap's checks, in a process where nothing is allocated yet; what went wrong, or "".
std::string memory_cap_problem() {
  if (const size_t live = gpu_memory_stats(0).in_use; live != 0)
    return "a fresh process has " + std::to_string(live) + " bytes in use";
  set_gpu_memory_policy(0, MemoryPolicy::limit("64MiB"));
  Tensor ok = Tensor::empty(Shape{8 << 20}, DType::F32, Device::cuda(0));  // 32 MiB fits
  try {
    Tensor::empty(Shape{16 << 20}, DType::F32, Device::cuda(0));  // 64 MiB more does not
    return "no OutOfMemoryError past the cap";
  } catch (const OutOfMemoryError& e) {
    const std::string m = e.what();
    for (const char* part : {"cuda:0", "limit 64.0 MiB", "in use 32.0 MiB"})
      if (m.find(part) == std::string::npos) return "the message lacks '" + std::string(part) + "': " + m;
  }
  try {
    set_gpu_memory_policy(0, MemoryPolicy{});
    return "the policy changed while a tensor was live";
  } catch (const ArgumentError&) {
  }
  ok = Tensor();
  if (gpu_memory_stats(0).peak_in_use < (size_t{32} << 20)) return "the peak does not count the 32 MiB tensor";
  set_gpu_memory_policy(0, MemoryPolicy{});  // back to growing, nothing live
  return "";
}

// A cap is set before anything is allocated (set_gpu_memory_policy refuses it otherwise), and an
// earlier test of this process may hold blocks for good: so the cap's checks run in a fresh
// process of this binary (gtest's threadsafe death-test style re-executes it, a new CUDA context).
TEST_F(OnGpu, AMemoryCapRefusesWhatWouldPassItAndSaysWhy) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const std::string problem = memory_cap_problem();
        std::fprintf(stderr, "%s\n", problem.empty() ? "the cap holds" : problem.c_str());
        std::fflush(stderr);
        std::_Exit(problem.empty() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "the cap holds");
}

// Inside a DeviceScope on a GPU, tensors and models land there; matmul runs on cuBLAS.
TEST_F(OnGpu, DeviceScopePlacesTensorsModelsAndMatmul) {
  const Device gpu = Device::cuda(cuda_status().gpus.front().index);
  const Tensor a = test::random_tensor(Shape{67, 45}, 1), b = test::random_tensor(Shape{45, 29}, 2);
  const Tensor expected = matmul(a, b);
  {
    DeviceScope scope(gpu, /*strict=*/true);
    EXPECT_EQ(current_device(), gpu);
    EXPECT_EQ(Tensor::zeros(Shape{3}).device(), gpu);
    EXPECT_EQ(Tensor::uniform(Shape{3}, 0.0f, 1.0f, 5).device(), gpu);
    EXPECT_EQ(Tensor::uniform(Shape{3}, 0.0f, 1.0f, 5).to_vector(),
              Tensor::uniform(Shape{3}, 0.0f, 1.0f, 5, Device::cpu()).to_vector());  // the same draws
    EXPECT_EQ(Tensor::from_vector(Shape{2}, std::vector<float>{1, 2}).to_vector(), (std::vector<float>{1, 2}));
    EXPECT_EQ(Tensor::from_vector(Shape{2}, std::vector<float>{1, 2}).device(), gpu);
    Sequential m;
    m.add<Dense>(4);
    m.build(Shape{3}, 1);
    EXPECT_EQ(m.device(), gpu);
    EXPECT_EQ(m.params().device(), gpu);
    const Tensor c = matmul(a.to(gpu), b.to(gpu));
    EXPECT_EQ(c.device(), gpu);
    const std::vector<float> got = c.to_vector(), want = expected.to_vector();
    double worst = 0;
    for (size_t i = 0; i < want.size(); ++i) worst = std::max(worst, std::abs(double(got[i]) - want[i]));
    EXPECT_LE(worst, 1e-5);  // 45-term dot products of O(1) values: a few ulps apart
  }
  EXPECT_EQ(current_device(), Device::cpu());
  EXPECT_EQ(Tensor::zeros(Shape{3}).device(), Device::cpu());
}

}  // namespace
}  // namespace ember
