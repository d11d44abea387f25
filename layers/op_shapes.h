// Geometry of the spatial ops, computed once by the layer and handed to either backend.
// Dimensions: N batch, C input channels, H/W input size, K output channels (conv),
// R/S window height/width, P/Q output height/width.
#pragma once

#include <cstdint>
#include <string>

namespace ember {

struct Conv2dShape {
  int64_t n = 0, c = 0, h = 0, w = 0;  // input
  int64_t k = 0, r = 0, s = 0;         // filters
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t p = 0, q = 0;                // output
  bool relu = false;                   // ReLU fused after bias
  std::string str() const;
  friend bool operator==(const Conv2dShape&, const Conv2dShape&) = default;
};

struct Pool2dShape {
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t r = 0, s = 0;  // window
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_left = 0;
  int64_t p = 0, q = 0;
  std::string str() const;
  friend bool operator==(const Pool2dShape&, const Pool2dShape&) = default;
};

}  // namespace ember
