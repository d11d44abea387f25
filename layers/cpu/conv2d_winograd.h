// A 3x3 stride-1 convolution's three passes by Winograd F(4x4, 3x3) on NHWC tensors (CPU; conv2d.cpp
// uses each where its fits() says so): the weight gradient (conv2d_winograd.cpp) and, at the end,
// the forward and backward-data (conv2d_winograd_data.cpp).
//
// The weight gradient. The direct weight gradient
// multiplies each of the 3x3 taps with every output position: 9 multiply-adds per output, input
// and filter channel. Here dy is cut into 4x4 tiles and x into the 6x6 tiles under them; in the
// transformed domain (A dy A^T, B^T x B: 36 points each) a tile's 3x3 weight gradient is a
// product per point, so the sums over tiles and images become 36 small GEMMs (K x C, over the
// tiles): 36/16 multiply-adds per output instead of 9, and the transforms on top. oneDNN 2.6's
// own Winograd weight gradient runs in its blocked layout only and gained nothing after the
// reorders (docs/benchmarks.md); this one reads NHWC as it is.
//
// Layouts: x (N, H, W, C) and dy (N, P, Q, K) NHWC; dw (K, C, 3, 3) row-major; db (K). Written
// (=), not accumulated. The same bits at any thread count, and summed over the batch in its sum
// order (core/pairwise_sum.h: each group of 16 images on its own, the groups as a pairwise tree),
// so a batch's dw is its aligned shares' added in that tree, bit for bit (see the .cpp); the
// rounding differs from the direct sum's by about 2e-6 of the sum of |products|
// (tests/layers/test_conv2d_winograd.cpp).
#pragma once

#include <vector>

#include "../geometry.h"

namespace ember::cpu {

// 3x3 kernels at stride 1 (any padding) with C a multiple of 16, K of 8, and outputs of at least
// 4x4 (smaller outputs leave most of each tile empty).
bool conv2d_winograd_weight_gradient_fits(const Conv2dShape& g);

// The caller's buffers, reused from call to call: a chunk's transformed tiles and the groups' dw
// and db (float), and the 36 points' sums over a group's chunks (double).
struct WinogradScratch {
  std::vector<float> tiles;
  std::vector<double> sums;
};

// dw, db from x and dy (the ReLU's mask already applied). scratch: the caller's, reused.
// allow_avx512 = false: the AVX2 sums even where the CPU has AVX-512 (tests run both).
void conv2d_winograd_weight_gradient(const Conv2dShape& g, const float* x, const float* dy, float* dw, float* db,
                                     WinogradScratch& scratch, bool allow_avx512 = true);

// The forward and the backward-data: both are a convolution of an NHWC input with 3x3 taps, as
// 36 GEMMs in the transformed domain (36/16 multiply-adds per output instead of 9), per group of
// 24 tiles (across images) on one thread: the same bits at any thread count and for any share of
// the batch.
// Their rounding differs from the direct sum's by up to ~1e-6 (forward) and ~8e-6 (backward-data)
// of an output's sum of |products|
// (tests/layers/test_conv2d_winograd_data.cpp). oneDNN 2.6's own Winograd forward runs in its
// blocked layout only (reorders in and out) and has no backward-data; these read and write NHWC.

// Structural zeros are exact in both: an output whose 3x3 window of the input is all zero (+-0 in
// every channel) is written as the direct sum gives it, the bias alone (then ReLU), or 0
// (docs/architecture.md, Numerics).

// The caller's buffers, reused from call to call: the transformed filters and each thread's
// transformed tiles.
struct WinogradConvScratch {
  std::vector<float> work;
};

// 3x3 kernels at stride 1 (any padding) with C and K multiples of 16 and outputs of at least 4x4,
// where cpu_avx512() holds (AVX-512, not capped by EMBER_MAX_CPU_ISA: 16 channels per vector;
// there is no AVX2 version).
bool conv2d_winograd_forward_fits(const Conv2dShape& g);
bool conv2d_winograd_backward_data_fits(const Conv2dShape& g);

// y (N, P, Q, K) = x (N, H, W, C) * w (K, C, 3, 3) + b (K), then ReLU where g.relu; written (=).
void conv2d_winograd_forward(const Conv2dShape& g, const float* x, const float* w, const float* b, float* y,
                             WinogradConvScratch& scratch);

// dx (N, H, W, C) from dy (N, P, Q, K) and w (K, C, 3, 3); written (=).
void conv2d_winograd_backward_data(const Conv2dShape& g, const float* dy, const float* w, float* dx,
                                   WinogradConvScratch& scratch);

}  // namespace ember::cpu
