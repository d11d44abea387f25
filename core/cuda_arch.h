// Whether a build's CUDA architecture list (CMake's CUDA_ARCHITECTURES, e.g. "90" or
// "80-real;90") has code a GPU of compute capability major.minor can run: decided from the list
// alone, without creating a CUDA context (the status probe must not put one on every GPU).
// Private to the library.
#pragma once

#include <string_view>

namespace ember::detail {

enum class ArchCoverage { Yes, No, Unknown };

// Rules (CUDA's binary and PTX compatibility): an entry "XY" means SASS sm_XY and PTX
// compute_XY, "XY-real" SASS only, "XY-virtual" PTX only. SASS sm_XY runs on major X with minor
// >= Y; PTX compute_XY is compiled by the driver for any capability >= X.Y. An arch-specific
// entry ("90a") runs only on exactly X.Y, a family-specific one ("100f") on major X, minor >= Y.
// Unknown for a list CMake resolves itself ("all", "all-major", "native") or cannot be parsed:
// then the first use of the GPU decides.
ArchCoverage arch_coverage(std::string_view archs, int major, int minor);

}  // namespace ember::detail
