// SGD with optional momentum and Nesterov, Keras' rule:
//   velocity = momentum * velocity - lr * g;  p += velocity
//   (Nesterov: p += momentum * velocity - lr * g)
#pragma once

#include "optimizer.h"

namespace ember {

struct SgdOptions {
  float learning_rate = 1e-2f;
  float momentum = 0.0f;
  bool nesterov = false;
  float weight_decay = 0.0f;  // decoupled (Keras'), see Regularization
  float global_clipnorm = 0.0f;
  float clipvalue = 0.0f;
};

class SGD : public Optimizer {
 public:
  explicit SGD(SgdOptions options = {});
  std::string name() const override { return "SGD"; }
  void step(Tensor& params, const Tensor& grads) override;
  float learning_rate() const override { return opt_.learning_rate; }
  void set_learning_rate(float lr) override { opt_.learning_rate = lr; }
  std::vector<std::pair<std::string, Tensor>> state() const override { return {{"velocity", velocity_}}; }
  void set_state(const std::string& name, const Tensor& values) override;
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  const Regularization& regularization() const override { return reg_; }

 private:
  SgdOptions opt_;
  Regularization reg_;
  Tensor velocity_;
};

}  // namespace ember
