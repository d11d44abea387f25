// ChannelScale: a user-defined layer, y[n, c, ...] = gamma[c] * x[n, c, ...] + beta[c].
// It shows what a custom layer needs: build (shapes), param_specs (initialisers), do_forward,
// and do_backward that writes (=) its parameter gradients and returns dx (Layer::forward and
// Layer::backward call them after checking the order and dy's shape).
#pragma once

#include <ember/ember.h>

class ChannelScale : public ember::Layer {
 public:
  std::string type() const override { return "ChannelScale"; }
  ember::Shape build(const ember::Shape& sample_shape) override;
  std::vector<ember::ParamSpec> param_specs() const override;

 protected:
  const ember::Tensor& do_forward(const ember::Tensor& x, bool training) override;
  const ember::Tensor& do_backward(const ember::Tensor& dy) override;

 private:
  ember::Shape in_;
  int64_t channels_ = 0, inner_ = 0;  // inner_: elements per channel per sample
  ember::Tensor x_, x_rowmajor_, y_, dy_rowmajor_, dx_;
};
