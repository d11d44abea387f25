// Activation names and TensorFlow's padding arithmetic.
#include "activation.h"

#include <algorithm>

namespace ember {

const char* activation_name(Activation a) { return a == Activation::ReLU ? "relu" : "linear"; }

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

}  // namespace ember
