/// @file
/// SGD with optional momentum and Nesterov, Keras' rule:
///   velocity = momentum * velocity - lr * g;  p += velocity
///   (Nesterov: p += momentum * velocity - lr * g)
#pragma once

#include "optimizer.h"

namespace ember {

/// SGD's hyper-parameters, Keras' defaults.
struct SGDOptions {
  float learning_rate = 1e-2f;   ///< lr (> 0)
  float momentum = 0.0f;         ///< in [0, 1); 0: plain SGD
  bool nesterov = false;         ///< Nesterov momentum
  float weight_decay = 0.0f;     ///< decoupled (Keras'), see Regularization
  float global_clipnorm = 0.0f;  ///< see Regularization (0: off)
  float clipvalue = 0.0f;        ///< see Regularization (0: off)
};
/// The earlier name of SGDOptions (Ember 0.5.0 and before), kept.
using SgdOptions = SGDOptions;

/// SGD with optional momentum and Nesterov, Keras' rule (see sgd.h); state
/// "velocity".
class SGD : public Optimizer {
 public:
  /// ArgumentError for a learning rate that is not > 0, momentum outside [0, 1), or a bad
  /// Regularization value.
  explicit SGD(SGDOptions options = {});
  std::string name() const override { return "SGD"; }
  void step(Tensor& params, const Tensor& grads) override;
  float learning_rate() const override { return opt_.learning_rate; }
  void set_learning_rate(float lr) override { opt_.learning_rate = lr; }
  std::vector<std::pair<std::string, Tensor>> state() const override { return {{"velocity", velocity_}}; }
  void set_state(const std::string& name, const Tensor& values) override;
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  const Regularization& regularization() const override { return reg_; }

 private:
  SGDOptions opt_;
  Regularization reg_;
  Tensor velocity_;
};

}  // namespace ember
