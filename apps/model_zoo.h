// The apps' and benchmarks' models (train_mnist --model), from the library's ready-made ones
// (layers/model/zoo.h: the reference CNN, bn-cnn, the residual resnet), and their FLOP counts.
#pragma once

#include <vector>

#include "ember.h"

namespace ember::apps {

inline void add_reference_cnn(Sequential& m) { models::add_reference_cnn(m); }

// train_mnist --model bn-cnn (models::bn_cnn). The convolutions keep their bias (Keras would drop
// it before BatchNormalization, whose beta absorbs it: 96 parameters). On Fashion-MNIST, 15 epochs,
// seed 1 (docs/benchmarks.md): 92.27% with --lr-schedule cosine; Dropout 0.5 gave 91.70% (constant
// rate) and 92.02% (cosine), a hidden Dense128 91.75%.
inline void add_bn_cnn(Sequential& m) { models::add_bn_cnn(m); }

// train_mnist --model resnet (models::resnet; bench/pytorch_resnet.py is the same model in
// PyTorch). Its recipe (train_mnist's defaults for it): Adam 1e-3 with a cosine schedule down to 0
// over the epochs. On Fashion-MNIST, 15 epochs, seed 1 (docs/benchmarks.md): 92.92% without the
// Dropout (it overfits: training loss 0.016), 93.04% with Dropout 0.3, 93.11% with 0.5.
inline Model make_resnet(const Shape& input = Shape{1, 28, 28}) { return models::resnet(input); }

// Multiply-adds x2 of each layer's forward at this batch size (Conv2D and Dense; 0 for the others).
inline std::vector<double> forward_flop(const Model& m, int64_t batch) {
  const auto& shapes = m.layer_output_shapes();
  std::vector<double> flop(m.layers().size(), 0.0);
  for (size_t i = 0; i < flop.size(); ++i) {
    const Layer& l = *m.layers()[i];
    if (l.type() != "Conv2D" && l.type() != "Dense") continue;                          // the others are memory-bound
    const Shape k = l.params()[0].shape();                                              // (K, C, R, S) or (out, in)
    const double per_out = static_cast<double>(k.numel()) / static_cast<double>(k[0]);  // C*R*S or in
    flop[i] = 2.0 * static_cast<double>(shapes[i].numel()) * static_cast<double>(batch) * per_out;
  }
  return flop;
}

// One training step: forward, weight gradients and input gradients (a layer reading only the
// input computes none), for GFLOP/s figures. Pooling, ReLU, loss and Adam are memory-bound and
// not counted.
inline double training_flop(const Model& m, int64_t batch) {
  const std::vector<double> f = forward_flop(m, batch);
  double flop = 0;
  for (size_t i = 0; i < f.size(); ++i) flop += f[i] * (m.layers()[i]->needs_input_grad() ? 3.0 : 2.0);
  return flop;
}

// One inference forward (what evaluate() runs per batch).
inline double inference_flop(const Model& m, int64_t batch) {
  double flop = 0;
  for (double f : forward_flop(m, batch)) flop += f;
  return flop;
}

}  // namespace ember::apps
