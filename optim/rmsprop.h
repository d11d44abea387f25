/// @file
/// RMSprop with Keras' defaults and rule (not centered, no momentum):
///   v = rho v + (1 - rho) g^2;  p -= lr g / sqrt(v + epsilon)
/// (epsilon inside the root, as Keras and TensorFlow's ApplyRMSProp; PyTorch adds it outside)
#pragma once

#include "optimizer.h"

namespace ember {

/// RMSprop's hyper-parameters, Keras' defaults.
struct RmspropOptions {
  float learning_rate = 1e-3f;   ///< lr (> 0)
  float rho = 0.9f;              ///< the squares' decay, in [0, 1)
  float epsilon = 1e-7f;         ///< added inside the root (> 0)
  float weight_decay = 0.0f;     ///< see Regularization
  float global_clipnorm = 0.0f;  ///< see Regularization (0: off)
  float clipvalue = 0.0f;        ///< see Regularization (0: off)
};

/// RMSprop, Keras' rule (see rmsprop.h); state "v".
class RMSprop : public Optimizer {
 public:
  /// ArgumentError for a learning rate or epsilon that is not > 0, rho outside [0, 1), or a bad
  /// Regularization value.
  explicit RMSprop(RmspropOptions options = {});
  std::string name() const override { return "RMSprop"; }
  void step(Tensor& params, const Tensor& grads) override;
  float learning_rate() const override { return opt_.learning_rate; }
  void set_learning_rate(float lr) override { opt_.learning_rate = lr; }
  std::vector<std::pair<std::string, Tensor>> state() const override { return {{"v", v_}}; }
  void set_state(const std::string& name, const Tensor& values) override;
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  const Regularization& regularization() const override { return reg_; }

 private:
  RmspropOptions opt_;
  Regularization reg_;
  Tensor v_;
};

}  // namespace ember
