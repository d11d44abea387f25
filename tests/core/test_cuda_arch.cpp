// Whether a build's CUDA architecture list covers a GPU (core/cuda_arch.h): the status probe
// decides this without touching the GPU, so the rules are checked here, on any machine.
#include <gtest/gtest.h>

#include "core/cuda_arch.h"

namespace ember::detail {
namespace {

constexpr ArchCoverage kYes = ArchCoverage::Yes, kNo = ArchCoverage::No, kUnknown = ArchCoverage::Unknown;

TEST(CudaArch, SassRunsWithinItsMajorAtOrAboveItsMinor) {
  EXPECT_EQ(arch_coverage("80-real", 8, 0), kYes);
  EXPECT_EQ(arch_coverage("80-real", 8, 6), kYes);  // sm_80 SASS on an sm_86 GPU
  EXPECT_EQ(arch_coverage("86-real", 8, 0), kNo);   // not below its minor
  EXPECT_EQ(arch_coverage("80-real", 9, 0), kNo);   // nor on another major
  EXPECT_EQ(arch_coverage("90-real", 8, 9), kNo);
}

TEST(CudaArch, PtxIsCompiledForEveryLaterGpu) {
  EXPECT_EQ(arch_coverage("90", 9, 0), kYes);   // the default: sm_90 SASS + compute_90 PTX
  EXPECT_EQ(arch_coverage("90", 10, 0), kYes);  // Blackwell JITs the PTX
  EXPECT_EQ(arch_coverage("90", 8, 0), kNo);    // an A100 has no code in the default build
  EXPECT_EQ(arch_coverage("80-virtual", 12, 0), kYes);
  EXPECT_EQ(arch_coverage("90-virtual", 8, 6), kNo);
}

TEST(CudaArch, ListsArchSpecificAndFamilyEntries) {
  EXPECT_EQ(arch_coverage("80-real;90-real", 9, 0), kYes);
  EXPECT_EQ(arch_coverage("70-real,75-real", 8, 0), kNo);
  EXPECT_EQ(arch_coverage("90a", 9, 0), kYes);  // arch-specific: exactly 9.0
  EXPECT_EQ(arch_coverage("90a", 10, 0), kNo);
  EXPECT_EQ(arch_coverage("100f", 10, 3), kYes);  // family: 10.x at or above 10.0
  EXPECT_EQ(arch_coverage("100f", 12, 0), kNo);
  EXPECT_EQ(arch_coverage("", 9, 0), kNo);
}

TEST(CudaArch, ListsCMakeResolvesItselfAreLeftToTheFirstUse) {
  EXPECT_EQ(arch_coverage("native", 9, 0), kUnknown);
  EXPECT_EQ(arch_coverage("all-major", 8, 0), kUnknown);
  EXPECT_EQ(arch_coverage("all", 7, 5), kUnknown);
  EXPECT_EQ(arch_coverage("native;90", 9, 0), kYes);  // a match wins over the unknown part
}

}  // namespace
}  // namespace ember::detail
