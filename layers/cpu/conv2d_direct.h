// A convolution's weight gradient by direct sums on NHWC tensors (CPU; conv2d.cpp uses it where
// its fits() says so and the Winograd weight gradient, conv2d_winograd.h, does not): for each tap
// (r, s), dw[.][.][r][s] is a K x C GEMM of dy's rows with the x rows under them, summed over the
// batch's output positions. In the reference CNN that is conv2d_2 (64 -> 64 channels, 3x3 outputs:
// too few for Winograd tiles), where oneDNN 2.6's NHWC weight gradient ran at ~100 GFLOP/s and
// this one at ~195 (docs/benchmarks.md).
//
// Layouts: x (N, H, W, C) and dy (N, P, Q, K) NHWC, dy with the ReLU's mask already applied;
// dw (K, C, R, S) row-major; db (K). Written (=), not accumulated. Any kernel size, stride and
// padding. Each (tap, 8 filters, 32 channels) block sums its positions in the same order on
// whichever thread runs it: the same bits at any thread count. The sums are in float, chunk by
// chunk of images (so that a chunk's x and dy stay in L2), and over the batch in its sum order
// (core/pairwise_sum.h: each group of 16 images from zero, the groups as a pairwise tree), so a
// batch's weight gradient is its aligned shares' added in that tree, bit for bit.
#pragma once

#include <vector>

#include "../geometry.h"

namespace ember::cpu {

// C a multiple of 32 and K of 8 (both > 0), a batch and outputs that are not empty, where
// cpu_avx512() holds (AVX-512, not capped by EMBER_MAX_CPU_ISA: 16 channels per vector; there is
// no AVX2 version: without it conv2d.cpp keeps oneDNN's).
bool conv2d_direct_weight_gradient_fits(const Conv2dShape& g);

// dw, db from x and dy. scratch: the caller's, reused from call to call (the sums per tap).
void conv2d_direct_weight_gradient(const Conv2dShape& g, const float* x, const float* dy, float* dw, float* db,
                                   std::vector<float>& scratch);

}  // namespace ember::cpu
