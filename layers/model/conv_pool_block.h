// A Conv2D -> MaxPool2D pair run as one fused step on the CPU: a rewrite of the execution plan
// (plan.h). Private to the library. Two kinds:
// - fp32 (cpu/conv2d_maxpool.h): a convolution of few multiply-adds per output whose input
//   gradient nobody needs; its output never exists in memory.
// - bf16 (cpu/conv2d_maxpool_bf16.h): a convolution that runs in bf16 under the mixed_bf16 policy;
//   its output exists in bf16 only, and the pooled gradient goes straight into its bf16 gradient.
//   It runs only while the convolution runs in bf16 (usable()); else the layers run on their own.
//
// The plan makes one per fusable pair at build (make() says which pairs fuse); on the CPU its
// forward/backward replace the two layers' (the layers' own stay untouched and keep working on
// their own, as in a custom loop or on a GPU). The results equal the unfused pair's up to the
// order of the convolution's float sums.
#pragma once

#include <memory>
#include <string>

#include "../../core/tensor.h"
#include "../conv2d.h"
#include "../cpu/bf16.h"
#include "../maxpool2d.h"
#include "step.h"

namespace ember::detail {

class ConvPoolBlock final : public Step {
 public:
  // The step for `first` -> `second` (layers i and i + 1) when they are a Conv2D and a MaxPool2D
  // that fuse on the CPU: fp32 (cpu::conv2d_maxpool_fits, and the convolution's input gradient is
  // not wanted), else bf16 (a convolution that runs in bf16 under mixed_bf16, C*R*S > 27, and
  // cpu::conv2d_maxpool_bf16_fits); else null.
  static std::unique_ptr<ConvPoolBlock> make(Layer& first, Layer& second, size_t i);

  // pool(conv(x)) for x on the CPU, (N, C, H, W) row-major or NHWC; x is kept (shallowly) for backward.
  const Tensor& forward(const std::vector<const Tensor*>& inputs, bool training) override;
  // Writes (=) the convolution's kernel and bias gradients from the pool output's gradient (bf16:
  // into scratch for a frozen convolution); the input's gradient: bf16 where the convolution needs
  // it, else not computed (undefined).
  std::span<const Tensor> backward(const Tensor& dy) override;
  // The pair's own buffers and the two layers'.
  void release_buffers() override;
  // Whether it may run now: fp32, the convolution's input gradient is still not wanted (a custom
  // loop may ask for it after build); bf16, the convolution runs in bf16 now (conv2d_runs_bf16:
  // mixed_bf16 on a CPU with AMX). Else the layers run on their own.
  bool usable() const override;
  std::string kernel_info(int64_t batch, Device device) const override;

 private:
  std::span<const Tensor> backward_bf16(const Tensor& dy);
  ConvPoolBlock(Conv2D& conv, MaxPool2D& pool, size_t i, bool bf16)
      : Step(i, i + 1), conv_(conv), pool_(pool), bf16_(bf16) {}
  Conv2D& conv_;
  MaxPool2D& pool_;
  bool bf16_;
  Tensor x_, y_, argmax_, dy_copy_, scratch_;
  Tensor dx_;                     // bf16: the input gradient, where wanted
  Tensor no_dx_;                  // an input gradient not computed (undefined)
  Tensor dw_unused_, db_unused_;  // bf16, a frozen convolution's parameter gradients
  cpu::Bf16Buffers keep_;
  int64_t batch_ = 0;
  bool trained_ = false;  // the last forward was a training one (argmax_ is its)
};

}  // namespace ember::detail
