// Activation and padding choices shared by the layers and their backends.
#pragma once

#include <cstdint>

namespace ember {

enum class Activation { None, ReLU };
enum class Padding { Valid, Same };  // Keras' meanings: no padding / output size = ceil(input / stride)

const char* activation_name(Activation a);

// Output size and leading pad along one spatial axis, as Keras/TensorFlow compute them.
struct AxisGeometry {
  int64_t out = 0;
  int64_t pad_before = 0;
  int64_t pad_after = 0;
};
AxisGeometry axis_geometry(int64_t in, int64_t window, int64_t stride, Padding padding);

}  // namespace ember

namespace ember {
// A (height, width) pair: kernel sizes, pool sizes, strides. Written {3, 3}.
struct Size2 {
  int64_t h = 1, w = 1;
};
}  // namespace ember
