/// @file
/// Geometry of the spatial ops (Conv2D, MaxPool2D), computed once by the layer and handed to
/// either backend, and Keras/TensorFlow's padding arithmetic. Dimensions: N batch, C input
/// channels, H/W input size, K output channels (conv), R/S window height/width, P/Q output
/// height/width.
#pragma once

#include <cstdint>
#include <string>

#include "../core/shape.h"

namespace ember {

/// A window op's padding, Keras' meanings: Valid, no padding; Same, output size = ceil(input / stride).
enum class Padding { Valid, Same };

/// A (height, width) pair: kernel sizes, pool sizes, strides. Written {3, 3}.
struct Size2 {
  /// The height and the width.
  ///@{
  int64_t h = 1, w = 1;
  ///@}
};

/// Output size and padding along one spatial axis, as Keras/TensorFlow compute them (SAME puts
/// the odd pad after).
struct AxisGeometry {
  int64_t out = 0;         ///< the output size
  int64_t pad_before = 0;  ///< padding before the first input position
  int64_t pad_after = 0;   ///< padding after the last (SAME's odd pad)
};
/// The output size and padding of a `window` moved by `stride` over `in` positions with `padding`.
AxisGeometry axis_geometry(int64_t in, int64_t window, int64_t stride, Padding padding);

/// The spatial part every window op shares: a per-sample (C, H, W) input, the window, the
/// strides, the padding on each side and the output size.
struct WindowGeometry {
  /// The per-sample input: channels, height, width.
  ///@{
  int64_t c = 0, h = 0, w = 0;
  ///@}
  /// The window's height and width.
  ///@{
  int64_t r = 0, s = 0;
  ///@}
  /// The strides along the height and the width.
  ///@{
  int64_t stride_h = 1, stride_w = 1;
  ///@}
  /// The padding on each side.
  ///@{
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  ///@}
  /// The output's height and width.
  ///@{
  int64_t p = 0, q = 0;
  ///@}
  friend bool operator==(const WindowGeometry&, const WindowGeometry&) = default;  ///< Every field equal.
};
/// Throws ShapeError naming `op` when `sample` is not (C, H, W) or the window does not fit:
/// "Conv2D: a 5x5 kernel does not fit the input (1, 3, 3) with valid padding".
WindowGeometry window_geometry(const Shape& sample, Size2 window, Size2 strides, Padding padding, const char* op,
                               const char* window_name);

/// A convolution's geometry: the window geometry, the batch, the filters and the fused ReLU.
struct Conv2dShape : WindowGeometry {
  int64_t n = 0;            ///< batch
  int64_t k = 0;            ///< filters
  bool relu = false;        ///< ReLU fused after bias
  std::string str() const;  ///< "conv N64 C1 28x28 -> K32 26x26 window 3x3 +relu"
  friend bool operator==(const Conv2dShape&, const Conv2dShape&) = default;  ///< Every field equal.
};

/// A pooling op's geometry: the window geometry and the batch.
struct Pool2dShape : WindowGeometry {
  int64_t n = 0;            ///< batch
  std::string str() const;  ///< "pool N64 C32 26x26 -> 13x13 window 2x2"
  /// Whether the windows tile the input: strides equal to the window and no padding on any side,
  /// so each input lies in at most one window (the pools' backward writes it once).
  bool tiles() const {
    return stride_h == r && stride_w == s && pad_top == 0 && pad_left == 0 && p * r <= h && q * s <= w;
  }
  friend bool operator==(const Pool2dShape&, const Pool2dShape&) = default;  ///< Every field equal.
};

}  // namespace ember
