// What the GPU pooling kernels share (layers/cuda/avgpool2d.cu, maxpool2d.cu): the window
// geometry in the kernels' index type, the grid and its index type, the tensors' check, the
// layouts' index arithmetic and which outputs' windows cover an input. CUDA code only (included by .cu files).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "../../core/cuda/check.h"
#include "../../core/cuda/context.h"
#include "../../core/tensor.h"
#include "../geometry.h"

namespace ember::cuda::pool {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 4096;

// The geometry in the kernels' index type: int32_t when every index fits (32-bit division is
// far cheaper than 64-bit), else int64_t. Signed: window starts may lie in the padding (< 0).
template <typename I>
struct Geo {
  I c, h, w, p, q, r, s, stride_h, stride_w, pad_top, pad_left;
};

template <typename I>
Geo<I> geo(const Pool2dShape& g) {
  return {I(g.c), I(g.h),        I(g.w),        I(g.p),       I(g.q),       I(g.r),
          I(g.s), I(g.stride_h), I(g.stride_w), I(g.pad_top), I(g.pad_left)};
}

inline unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

// Whether every index, and the grid-stride loop's last step past the end, fits in int32_t.
inline bool fits_i32(int64_t total) { return total + kMaxBlocks * kThreads <= std::numeric_limits<int32_t>::max(); }

// Runs launch(I{}) with I = int32_t when every index below `largest` (the largest tensor's
// element count) fits, else int64_t, then checks the launch.
template <typename Launch>
void launch_indexed(int64_t largest, Launch&& launch) {
  if (fits_i32(largest))
    launch(int32_t{});
  else
    launch(int64_t{});
  EMBER_CUDA_CHECK(cudaGetLastError());
}

// t must be an (N, C, H, W) tensor of `shape` on ctx's device in `layout`; the message, naming
// `op`, the geometry and `what`, is built only when it is not (this runs several times per op per
// step).
inline void check(const Context& ctx, const Tensor& t, const Shape& shape, const char* op, const char* what,
                  const Pool2dShape& g, Layout layout) {
  if (!is_nchw(ctx, t, shape, layout)) check_nchw(ctx, t, shape, std::string(op) + " for " + g.str(), what, layout);
}

// Element e of an (N, C, rows, cols) tensor in its layout (NCHW or NHWC) as (b, ch, row, col).
template <typename I>
__device__ __forceinline__ void decode(I e, I c, I rows, I cols, bool nhwc, I& b, I& ch, I& row, I& col) {
  if (nhwc) {
    ch = e % c;
    I t = e / c;
    col = t % cols;
    t /= cols;
    row = t % rows;
    b = t / rows;
  } else {
    col = e % cols;
    I t = e / cols;
    row = t % rows;
    t /= rows;
    ch = t % c;
    b = t / c;
  }
}

// Where the plane (b, ch) starts in the input (N, C, H, W) and in the output (N, C, P, Q), and
// the steps of one row and one column in each.
template <typename I>
struct Planes {
  I in, in_row, in_col, out, out_row, out_col;
};

template <typename I>
__device__ __forceinline__ Planes<I> planes(const Geo<I>& g, I b, I ch, bool nhwc) {
  if (nhwc) return {(b * g.h * g.w) * g.c + ch, g.w * g.c, g.c, (b * g.p * g.q) * g.c + ch, g.q * g.c, g.c};
  const I bc = b * g.c + ch;
  return {bc * g.h * g.w, g.w, I(1), bc * g.p * g.q, g.q, I(1)};
}

// The outputs [first, last) along one axis whose windows cover input position i: output o
// covers i when o * stride - pad <= i < o * stride - pad + window.
template <typename I>
__device__ __forceinline__ void covering(I i, I pad, I window, I stride, I out, I& first, I& last) {
  const I a = i + pad;
  first = a < window ? I(0) : (a - window) / stride + 1;
  last = min(a / stride + 1, out);
}

}  // namespace ember::cuda::pool
