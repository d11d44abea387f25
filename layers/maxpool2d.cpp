// MaxPool2D layer.
#include "maxpool2d.h"

#include "../core/error.h"
#include "layer_config.h"
#include "ops/maxpool2d.h"

namespace ember {

MaxPool2D::MaxPool2D(Size2 pool, std::optional<Size2> strides, Padding padding)
    : pool_(pool), strides_(strides.value_or(pool)), padding_(padding) {
  EMBER_CHECK(pool.h > 0 && pool.w > 0, ArgumentError, "MaxPool2D: pool size must be positive");
  EMBER_CHECK(strides_.h > 0 && strides_.w > 0, ArgumentError, "MaxPool2D: strides must be positive");
}

Shape MaxPool2D::build(const Shape& in) {
  g_ = Pool2dShape{};
  static_cast<WindowGeometry&>(g_) = window_geometry(in, pool_, strides_, padding_, "MaxPool2D", "pool");
  in_shape_ = in;
  return Shape{g_.c, g_.p, g_.q};
}

const Tensor& MaxPool2D::do_forward(const Tensor& x, bool /*training*/) {
  EMBER_CHECK(x.rank() == 4 && x.shape().without_batch() == in_shape_, ShapeError,
              "MaxPool2D: expects input (N, " + std::to_string(g_.c) + ", " + std::to_string(g_.h) + ", " +
                  std::to_string(g_.w) + "); given " + x.shape().str());
  g_.n = x.dim(0);
  return detail::maxpool2d_forward(state_, g_, x);
}

const Tensor& MaxPool2D::do_backward(const Tensor& dy) {
  if (!needs_input_grad()) return no_input_grad();
  return detail::maxpool2d_backward(state_, g_, dy, mask_input_relu_);
}

std::string MaxPool2D::kernel_info(int64_t /*batch*/, Device device) const {
  return std::string(detail::maxpool2d_kernel_info(device)) + (mask_input_relu_ ? ", backward fused with ReLU's" : "");
}

LayerConfig MaxPool2D::config() const {
  return {{"pool", config_value(pool_)}, {"strides", config_value(strides_)}, {"padding", config_value(padding_)}};
}

}  // namespace ember
