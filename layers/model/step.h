// One step of a model's pass (plan.h): a layer call, or several run as one by a rewrite of the
// plan (conv_pool_block.h). The passes (execute.h) run steps without knowing which kind they are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "../../core/tensor.h"

namespace ember::detail {

/// One step of a pass: layer calls [first, last] in run order run as one. Its inputs are layer
/// first's, its output is layer last's; the layers inside it hand nothing to anyone else.
class Step {
 public:
  Step(size_t first, size_t last) : first_(first), last_(last) {}
  virtual ~Step() = default;
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;
  size_t first() const { return first_; }
  size_t last() const { return last_; }

  /// Layer last's output from layer first's inputs (each non-null).
  virtual const Tensor& forward(const std::vector<const Tensor*>& inputs, bool training) = 0;
  /// From the output's gradient: writes (=) the parameter gradients of its layers and returns the
  /// gradient of each input of layer first (undefined where none is computed).
  virtual std::span<const Tensor> backward(const Tensor& dy) = 0;
  /// As Layer::release_buffers, for every buffer the step and its layers hold.
  virtual void release_buffers() = 0;
  /// What runs it at this batch size on `device` (--log-device-placement).
  virtual std::string kernel_info(int64_t batch, Device device) const = 0;
  /// Whether a rewrite may run now (a condition it was made under can change after build: then
  /// its layers run one by one). A layer's own step always may.
  virtual bool usable() const { return true; }

 private:
  size_t first_, last_;
};

}  // namespace ember::detail
