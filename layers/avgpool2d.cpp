// AvgPool2D and GlobalAvgPool2D layers (GlobalAvgPool2D is an average pool whose window is the
// whole image: its (N, C, 1, 1) output is (N, C) in either layout).
#include "avgpool2d.h"

#include "../core/error.h"
#include "layer_config.h"
#include "ops/avgpool2d.h"

namespace ember {

AvgPool2D::AvgPool2D(Size2 pool, std::optional<Size2> strides, Padding padding)
    : pool_(pool), strides_(strides.value_or(pool)), padding_(padding) {
  EMBER_CHECK(pool.h > 0 && pool.w > 0, ArgumentError, "AvgPool2D: pool size must be positive");
  EMBER_CHECK(strides_.h > 0 && strides_.w > 0, ArgumentError, "AvgPool2D: strides must be positive");
}

Shape AvgPool2D::build(const Shape& in) {
  g_ = Pool2dShape{};
  static_cast<WindowGeometry&>(g_) = window_geometry(in, pool_, strides_, padding_, "AvgPool2D", "pool");
  in_shape_ = in;
  return Shape{g_.c, g_.p, g_.q};
}

const Tensor& AvgPool2D::do_forward(const Tensor& x, bool /*training*/) {
  EMBER_CHECK(x.rank() == 4 && x.shape().without_batch() == in_shape_, ShapeError,
              "AvgPool2D: expects input (N, " + std::to_string(g_.c) + ", " + std::to_string(g_.h) + ", " +
                  std::to_string(g_.w) + "); given " + x.shape().str());
  g_.n = x.dim(0);
  return detail::avgpool2d_forward(state_, g_, x);
}

const Tensor& AvgPool2D::do_backward(const Tensor& dy) {
  if (!needs_input_grad()) return no_input_grad();
  return detail::avgpool2d_backward(state_, g_, dy);
}

std::string AvgPool2D::kernel_info(int64_t, Device device) const { return detail::avgpool2d_kernel_info(device); }

Shape GlobalAvgPool2D::build(const Shape& in) {
  EMBER_CHECK(in.rank() == 3, ShapeError,
              "GlobalAvgPool2D: expects (channels, height, width) samples, got " + in.str());
  g_ = Pool2dShape{};
  static_cast<WindowGeometry&>(g_) =
      window_geometry(in, Size2{in[1], in[2]}, Size2{1, 1}, Padding::Valid, "GlobalAvgPool2D", "pool");
  in_shape_ = in;
  return Shape{in[0]};
}

void GlobalAvgPool2D::do_release_buffers() {
  Layer::do_release_buffers();
  y_ = dy4_ = Tensor();
}

const Tensor& GlobalAvgPool2D::do_forward(const Tensor& x, bool /*training*/) {
  EMBER_CHECK(x.rank() == 4 && x.shape().without_batch() == in_shape_, ShapeError,
              "GlobalAvgPool2D: expects input (N, " + std::to_string(g_.c) + ", " + std::to_string(g_.h) + ", " +
                  std::to_string(g_.w) + "); given " + x.shape().str());
  g_.n = x.dim(0);
  const Tensor& y = detail::avgpool2d_forward(state_, g_, x);  // (N, C, 1, 1): the same bytes as (N, C)
  y_ = y.relabel(Layout::RowMajor).reshape(Shape{g_.n, g_.c});
  return y_;
}

const Tensor& GlobalAvgPool2D::do_backward(const Tensor& dy) {
  if (!needs_input_grad()) return no_input_grad();
  const Tensor rm = dy.layout() == Layout::RowMajor ? dy : dy.to_layout(Layout::RowMajor);
  dy4_ = rm.reshape(Shape{g_.n, g_.c, 1, 1});
  return detail::avgpool2d_backward(state_, g_, dy4_);
}

std::string GlobalAvgPool2D::kernel_info(int64_t, Device device) const { return detail::avgpool2d_kernel_info(device); }

LayerConfig AvgPool2D::config() const {
  return {{"pool", config_value(pool_)}, {"strides", config_value(strides_)}, {"padding", config_value(padding_)}};
}

}  // namespace ember
