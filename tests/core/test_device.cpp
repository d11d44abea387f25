// Devices: parsing, device scopes, soft placement, library versions.
#include <gtest/gtest.h>

#include <thread>

#include "test_util.h"

namespace ember {
namespace {

TEST(Device, ParsesTheSpellingsUsersType) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("CPU"), Device::cpu());
  EXPECT_EQ(Device::parse("gpu"), Device::cuda(0));
  EXPECT_EQ(Device::parse("gpu:1"), Device::cuda(1));
  EXPECT_EQ(Device::parse("cuda:0"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::cuda(3).str(), "cuda:3");
  for (const char* bad : {"", "tpu", "gpu:", "gpu:-1", "gpu:1x", "cuda:a", "gpu1", "cpu:0"})
    EXPECT_THROW(Device::parse(bad), ArgumentError) << bad;
}

TEST(Runtime, SoftPlacementFallsBackAndStrictThrows) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is usable here; the fallback path is not reachable";
  EXPECT_FALSE(cuda_status().reason.empty());
  EXPECT_EQ(resolve_device(Device::cuda(0), /*strict=*/false), Device::cpu());
  EXPECT_THROW(resolve_device(Device::cuda(0), /*strict=*/true), DeviceError);
  EXPECT_EQ(resolve_device(Device::cpu(), true), Device::cpu());
}

TEST(DeviceScope, NamesTheDefaultDeviceAndRestoresItNested) {
  EXPECT_EQ(current_device(), Device::cpu());
  {
    DeviceScope outer(Device::cpu());
    EXPECT_EQ(Tensor::zeros(Shape{2}).device(), Device::cpu());
    if (!cuda_available()) {
      // Soft placement: a missing GPU gives the CPU (with a warning); strict throws and leaves
      // the scope stack as it was.
      DeviceScope soft(Device::cuda(0));
      EXPECT_EQ(soft.device(), Device::cpu());
      EXPECT_EQ(current_device(), Device::cpu());
      EXPECT_THROW(DeviceScope(Device::cuda(0), /*strict=*/true), DeviceError);
      EXPECT_EQ(current_device(), Device::cpu());
    }
  }
  EXPECT_EQ(current_device(), Device::cpu());
  // The scope is per thread: another thread starts on the CPU.
  Device seen = Device::cuda(3);
  std::thread([&] { seen = current_device(); }).join();
  EXPECT_EQ(seen, Device::cpu());
}

TEST(Runtime, LibraryVersionsAreReported) {
  const auto libs = library_versions();
  ASSERT_FALSE(libs.empty());
  EXPECT_EQ(libs[0].name, "oneDNN");
  EXPECT_FALSE(libs[0].loaded.empty());
}

}  // namespace
}  // namespace ember
