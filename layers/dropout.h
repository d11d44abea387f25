/// @file
/// Dropout(rate): Keras' inverted dropout. In training each element is zeroed with probability
/// `rate` and the rest scaled by 1 / (1 - rate); in evaluation and predict the input passes
/// through unchanged. Which elements drop is a function of the model's seed, the layer's
/// position, the replica and a step counter kept in the model's state (saved in checkpoints):
/// the same seed gives the same masks on the CPU and on a GPU, in every layout, and a resumed run
/// draws what the uninterrupted one would have.
#pragma once

#include "layer.h"
#include "random_bits.h"

namespace ember {

/// Inverted dropout at `rate`, Keras' semantics (see dropout.h).
class Dropout : public Layer {
 public:
  /// 0 <= rate < 1 (ArgumentError else).
  explicit Dropout(float rate);
  std::string type() const override { return "Dropout"; }
  bool rows_independent(bool training) const override { return !training; }
  Shape build(const Shape& sample_shape) override { return sample_shape; }
  std::vector<StateSpec> state_specs() const override;
  void set_random_seed(uint64_t seed) override { params_rng_.seed = seed; }
  uint64_t random_seed() const override { return params_rng_.seed; }
  std::string kernel_info(int64_t, Device device) const override;
  float rate() const { return rate_; }  ///< The probability an element drops in training.
  LayerConfig config() const override;

 protected:
  const Tensor& do_forward(const Tensor& x, bool training) override;
  const Tensor& do_backward(const Tensor& dy) override;

 private:
  float rate_;
  detail::DropoutParams params_rng_;
  bool masked_ = false;  // the last forward drew a mask (training with rate > 0)
};

}  // namespace ember
