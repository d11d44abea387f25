/// @file
/// Adam with Keras' defaults and Keras'/TensorFlow's update rule (after Regularization, optimizer.h):
///   t += 1;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
///   p -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + eps)
/// (epsilon is added to the uncorrected sqrt(v), as TensorFlow does; PyTorch adds it to the
/// bias-corrected one, which differs only in how eps scales early in training).
#pragma once

#include "optimizer.h"

namespace ember {

/// Adam's hyper-parameters, Keras' defaults.
struct AdamOptions {
  float learning_rate = 1e-3f;   ///< lr (> 0)
  float beta1 = 0.9f;            ///< b1, the first moment's decay, in [0, 1)
  float beta2 = 0.999f;          ///< b2, the second moment's decay, in [0, 1)
  float epsilon = 1e-7f;         ///< eps (> 0)
  float weight_decay = 0.0f;     ///< decoupled (AdamW's rule), see Regularization
  float global_clipnorm = 0.0f;  ///< see Regularization (0: off)
  float clipvalue = 0.0f;        ///< see Regularization (0: off)
};

/// AdamW's defaults: Keras' (weight decay 0.004).
struct AdamWOptions {
  float learning_rate = 1e-3f;   ///< lr (> 0)
  float beta1 = 0.9f;            ///< b1, the first moment's decay, in [0, 1)
  float beta2 = 0.999f;          ///< b2, the second moment's decay, in [0, 1)
  float epsilon = 1e-7f;         ///< eps (> 0)
  float weight_decay = 0.004f;   ///< decoupled, see Regularization
  float global_clipnorm = 0.0f;  ///< see Regularization (0: off)
  float clipvalue = 0.0f;        ///< see Regularization (0: off)
};

/// Adam, Keras' and TensorFlow's rule (see adam.h); state "m" and "v".
class Adam : public Optimizer {
 public:
  /// ArgumentError for a learning rate or epsilon that is not > 0, a beta outside [0, 1), or a bad
  /// Regularization value.
  explicit Adam(AdamOptions options = {}) : Adam(options, "Adam") {}
  std::string name() const override { return "Adam"; }
  void step(Tensor& params, const Tensor& grads) override;
  void count_step() override;
  float learning_rate() const override { return opt_.learning_rate; }
  void set_learning_rate(float lr) override { opt_.learning_rate = lr; }
  std::vector<std::pair<std::string, Tensor>> state() const override { return {{"m", m_}, {"v", v_}}; }
  void set_state(const std::string& name, const Tensor& values) override;
  std::vector<std::pair<std::string, double>> hyperparameters() const override;
  const Regularization& regularization() const override { return reg_; }
  const AdamOptions& options() const { return opt_; }  ///< The hyper-parameters (the learning rate as set now).

 protected:
  Adam(AdamOptions options, const std::string& who);  ///< who: the name errors give

 private:
  AdamOptions opt_;
  Regularization reg_;
  Tensor m_, v_;
  Tensor device_scalars_;  // on a GPU: f64 {t, lr_t}, advanced by each step there
  int64_t device_t_ = -1;  // the t the device holds once its queued steps ran (-1: unknown)
};

/// Adam with decoupled weight decay (Loshchilov and Hutter; Keras' and PyTorch's AdamW): each step
/// first p -= lr * weight_decay * p (kernels and embedding tables only, in a Model), then Adam's update. Its checkpoint
/// state is Adam's (m, v) under the name "AdamW".
class AdamW : public Adam {
 public:
  /// The same checks as Adam's.
  explicit AdamW(AdamWOptions options = {});
  std::string name() const override { return "AdamW"; }
};

}  // namespace ember
