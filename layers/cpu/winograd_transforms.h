// The Winograd F(4x4, 3x3) input transform B^T along one axis (6 -> 6), written once for the
// kernels' vector types: the weight gradient's 8-lane tiles of x (conv2d_winograd.cpp, f8) and the
// forward's and backward-data's 16-lane input tiles (conv2d_winograd_data.cpp, f16). Each kernel's
// other transforms are its own (A for dy, A^T and G). Inlined into its caller, and so compiled for
// the caller's target (AVX2 or AVX-512); arrays by reference, never vectors by value (simd.h).
#pragma once

namespace ember::cpu {

template <class V>
[[gnu::always_inline]] inline void bt6(const V (&d)[6], V (&o)[6]) {
  o[0] = 4.0f * d[0] - 5.0f * d[2] + d[4];
  o[1] = -4.0f * (d[1] + d[2]) + d[3] + d[4];
  o[2] = 4.0f * (d[1] - d[2]) - d[3] + d[4];
  o[3] = 2.0f * (d[3] - d[1]) - d[2] + d[4];
  o[4] = 2.0f * (d[1] - d[3]) - d[2] + d[4];
  o[5] = 4.0f * d[1] - 5.0f * d[3] + d[5];
}

}  // namespace ember::cpu
