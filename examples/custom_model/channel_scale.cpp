// ChannelScale (see channel_scale.h). Works in the public row-major (NCHW) layout: inputs in
// another layout (a CPU Conv2D emits NHWC) are converted with ember::as_layout.
#include "channel_scale.h"

using namespace ember;

Shape ChannelScale::build(const Shape& in) {
  if (in.rank() < 1) throw ShapeError("ChannelScale: needs at least a channel dimension");
  in_ = in;
  channels_ = in[0];
  inner_ = in.numel() / channels_;
  return in;
}

std::vector<ParamSpec> ChannelScale::param_specs() const {
  return {{"gamma", Shape{channels_}, ParamSpec::Init::Ones, 0, 0},
          {"beta", Shape{channels_}, ParamSpec::Init::Zeros, 0, 0}};
}

const Tensor& ChannelScale::do_forward(const Tensor& x, bool) {
  x_ = as_layout(x, Layout::RowMajor, x_rowmajor_);
  ensure(y_, x.shape(), DType::F32, x.device());
  const float *in = x_.f32(), *g = params_[0].f32(), *b = params_[1].f32();
  float* out = y_.f32();
  const int64_t n = x.dim(0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < channels_; ++c)
      for (int64_t j = 0; j < inner_; ++j) {
        const int64_t k = (i * channels_ + c) * inner_ + j;
        out[k] = g[c] * in[k] + b[c];
      }
  return y_;
}

const Tensor& ChannelScale::do_backward(const Tensor& dy) {
  const Tensor& d = as_layout(dy, Layout::RowMajor, dy_rowmajor_);
  float *dg = grads_[0].f32(), *db = grads_[1].f32();
  const float *in = x_.f32(), *g = params_[0].f32(), *gy = d.f32();
  for (int64_t c = 0; c < channels_; ++c) dg[c] = db[c] = 0.0f;  // gradients are written, not accumulated
  ensure(dx_, x_.shape(), DType::F32, x_.device());
  float* dx = dx_.f32();
  const int64_t n = x_.dim(0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < channels_; ++c)
      for (int64_t j = 0; j < inner_; ++j) {
        const int64_t k = (i * channels_ + c) * inner_ + j;
        dg[c] += gy[k] * in[k];
        db[c] += gy[k];
        dx[k] = gy[k] * g[c];
      }
  return dx_;
}
