// RMSprop with Keras' defaults and rule (not centered, no momentum):
//   v = rho v + (1 - rho) g^2;  p -= lr g / sqrt(v + epsilon)
// (epsilon inside the root, as Keras and TensorFlow's ApplyRMSProp; PyTorch adds it outside)
#pragma once

#include "optimizer.h"

namespace ember {

struct RmspropOptions {
  float learning_rate = 1e-3f;
  float rho = 0.9f;
  float epsilon = 1e-7f;
  float weight_decay = 0.0f;  // see Regularization
  float global_clipnorm = 0.0f;
  float clipvalue = 0.0f;
};

class RMSprop : public Optimizer {
 public:
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
