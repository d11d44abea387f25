// TensorFlow's padding arithmetic and the printing of op geometries (error messages,
// --log-device-placement).
#include "geometry.h"

#include <algorithm>

#include "../core/error.h"

namespace ember {

AxisGeometry axis_geometry(int64_t in, int64_t window, int64_t stride, Padding padding) {
  AxisGeometry g;
  if (padding == Padding::Valid) {
    g.out = in >= window ? (in - window) / stride + 1 : 0;
    return g;
  }
  // SAME: out = ceil(in / stride); total pad split with the extra one after (TensorFlow's rule).
  g.out = (in + stride - 1) / stride;
  const int64_t total = std::max<int64_t>((g.out - 1) * stride + window - in, 0);
  g.pad_before = total / 2;
  g.pad_after = total - g.pad_before;
  return g;
}

WindowGeometry window_geometry(const Shape& sample, Size2 window, Size2 strides, Padding padding, const char* op,
                               const char* window_name) {
  EMBER_CHECK(sample.rank() == 3, ShapeError,
              std::string(op) + ": expects a per-sample input of 3 dimensions (C, H, W); given " + sample.str());
  WindowGeometry g;
  g.c = sample[0];
  g.h = sample[1];
  g.w = sample[2];
  g.r = window.h;
  g.s = window.w;
  g.stride_h = strides.h;
  g.stride_w = strides.w;
  const AxisGeometry ah = axis_geometry(g.h, g.r, g.stride_h, padding);
  const AxisGeometry aw = axis_geometry(g.w, g.s, g.stride_w, padding);
  g.pad_top = ah.pad_before;
  g.pad_bottom = ah.pad_after;
  g.pad_left = aw.pad_before;
  g.pad_right = aw.pad_after;
  g.p = ah.out;
  g.q = aw.out;
  EMBER_CHECK(g.p > 0 && g.q > 0, ShapeError,
              std::string(op) + ": a " + std::to_string(g.r) + "x" + std::to_string(g.s) + " " + window_name +
                  " does not fit the input " + sample.str() + " with valid padding");
  return g;
}

std::string Conv2dShape::str() const {
  auto s_ = [](int64_t v) { return std::to_string(v); };
  return "conv N" + s_(n) + " C" + s_(c) + " " + s_(h) + "x" + s_(w) + " -> K" + s_(k) + " " + s_(p) + "x" + s_(q) +
         " window " + s_(r) + "x" + s_(s) + (relu ? " +relu" : "");
}

std::string Pool2dShape::str() const {
  auto s_ = [](int64_t v) { return std::to_string(v); };
  return "pool N" + s_(n) + " C" + s_(c) + " " + s_(h) + "x" + s_(w) + " -> " + s_(p) + "x" + s_(q) + " window " +
         s_(r) + "x" + s_(s);
}

}  // namespace ember
