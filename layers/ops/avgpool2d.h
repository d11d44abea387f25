// Average pooling's dispatch (AvgPool2D and GlobalAvgPool2D): NHWC on the CPU, the input's own
// layout on a GPU. Private to the library.
#pragma once

#include <memory>

#include "../../core/tensor.h"
#include "../geometry.h"
#include "../layer.h"

namespace ember::detail {

const Tensor& avgpool2d_forward(std::unique_ptr<OpState>& state, const Pool2dShape& g, const Tensor& x);
const Tensor& avgpool2d_backward(std::unique_ptr<OpState>& state, const Pool2dShape& g, const Tensor& dy);
const char* avgpool2d_kernel_info(Device device);

}  // namespace ember::detail
