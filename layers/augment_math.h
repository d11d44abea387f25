// The augmentation layers' per-sample draw and index map (layers/augmentation.h), shared by the
// CPU loops and the CUDA kernels (EMBER_HOST_DEVICE) so both backends move the same pixels. Private
// to the library.
#pragma once

#include <cmath>
#include <cstdint>

#include "random_bits.h"

namespace ember::detail {

// What an augmentation layer does to an (N, C, H, W) batch, giving (N, C, out_h, out_w): output
// pixel (i, j) of sample b reads input pixel (fi + oy - pad_y, fj + ox - pad_x), where fi and fj are i
// and j flipped or not, and reads zero outside the input; then fma(v, scale, offset) (with rescale).
struct AugmentSpec {
  uint64_t seed = 0;
  int64_t h = 0, w = 0, out_h = 0, out_w = 0;
  int64_t pad_y = 0, pad_x = 0;         // zero rows above and below, zero columns left and right
  int64_t max_oy = 0, max_ox = 0;       // in training oy in [0, max_oy], ox in [0, max_ox]; else the middle
  bool flip_h = false, flip_v = false;  // in training each flips with probability 1/2
  bool random = false;                  // training: draw per sample; inference: the middle, no flip
  bool rescale = false;
  float scale = 1.0f, offset = 0.0f;
};

// Sample b's draw under the step's key: offsets and flips.
struct AugmentDraw {
  int64_t oy, ox;
  bool fv, fh;
};

// A draw of 24 uniform bits per choice: an offset in [0, m] is bits mod (m + 1) (bias below
// (m + 1) / 2^24).
EMBER_HOST_DEVICE inline AugmentDraw augment_draw(const AugmentSpec& s, uint64_t key, int64_t b) {
  if (!s.random) return {s.max_oy / 2, s.max_ox / 2, false, false};
  const uint64_t base = static_cast<uint64_t>(b) * 4;
  AugmentDraw d;
  d.oy = s.max_oy > 0 ? static_cast<int64_t>(element_bits24(key, base) % static_cast<uint32_t>(s.max_oy + 1)) : 0;
  d.ox = s.max_ox > 0 ? static_cast<int64_t>(element_bits24(key, base + 1) % static_cast<uint32_t>(s.max_ox + 1)) : 0;
  d.fv = s.flip_v && (element_bits24(key, base + 2) & 1u) != 0;
  d.fh = s.flip_h && (element_bits24(key, base + 3) & 1u) != 0;
  return d;
}

// A rescaled value: one rounding (a fused multiply-add) on both backends.
EMBER_HOST_DEVICE inline float augment_rescale(const AugmentSpec& s, float v) { return fmaf(v, s.scale, s.offset); }

// The input row (or column) output row i reads under draw d, or -1 outside the input.
EMBER_HOST_DEVICE inline int64_t augment_source(int64_t i, int64_t out, int64_t offset, bool flip, int64_t pad,
                                                int64_t in) {
  const int64_t r = (flip ? out - 1 - i : i) + offset - pad;
  return r >= 0 && r < in ? r : -1;
}

// Output pixel (i, j) of `plane` (b C + c) under draw d: forward y[out] = its source in x (zero
// outside), backward y[source] = x[out] (y zeroed before; each source has one output at most).
EMBER_HOST_DEVICE inline void augment_pixel(const AugmentSpec& s, const AugmentDraw& d, int64_t plane, int64_t i,
                                            int64_t j, const float* x, float* y, bool backward) {
  const int64_t r = augment_source(i, s.out_h, d.oy, d.fv, s.pad_y, s.h);
  const int64_t q = augment_source(j, s.out_w, d.ox, d.fh, s.pad_x, s.w);
  const int64_t out = (plane * s.out_h + i) * s.out_w + j;
  if (r < 0 || q < 0) {
    if (!backward) y[out] = 0.0f;
    return;
  }
  const int64_t in = (plane * s.h + r) * s.w + q;
  if (backward)
    y[in] = s.rescale ? x[out] * s.scale : x[out];
  else
    y[out] = s.rescale ? augment_rescale(s, x[in]) : x[in];
}

}  // namespace ember::detail
