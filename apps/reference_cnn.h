// The reference CNN of the apps and benchmarks (Keras' MNIST tutorial model, 93,322 parameters):
// Conv32-Pool-Conv64-Pool-Conv64-Flatten-Dense64-Dense10, ReLU after each Conv and the first Dense.
#pragma once

#include <vector>

#include "ember.h"

namespace ember::apps {

inline void add_reference_cnn(Sequential& m) {
  m.add<Conv2D>(32, Size2{3, 3}, Activation::ReLU);
  m.add<MaxPool2D>(Size2{2, 2});
  m.add<Conv2D>(64, Size2{3, 3}, Activation::ReLU);
  m.add<MaxPool2D>(Size2{2, 2});
  m.add<Conv2D>(64, Size2{3, 3}, Activation::ReLU);
  m.add<Flatten>();
  m.add<Dense>(64, Activation::ReLU);
  m.add<Dense>(10);
}

// train_mnist --model bn-cnn: Conv32-BatchNorm-ReLU-Pool, Conv64-BatchNorm-ReLU-Pool, Dropout 0.25,
// Dense10, the 3x3 convolutions SAME-padded (28 -> 14 -> 7). The convolutions keep their bias
// (Keras would drop it before BatchNormalization, whose beta absorbs it: 96 parameters). On
// Fashion-MNIST, 15 epochs, seed 1 (docs/benchmarks.md): 92.27% with --lr-schedule cosine;
// Dropout 0.5 gave 91.70% (constant rate) and 92.02% (cosine), a hidden Dense128 91.75%.
inline void add_bn_cnn(Sequential& m) {
  m.add<Conv2D>(32, Size2{3, 3}, Activation::None, Padding::Same);
  m.add<BatchNormalization>();
  m.add<ReLU>();
  m.add<MaxPool2D>(Size2{2, 2});
  m.add<Conv2D>(64, Size2{3, 3}, Activation::None, Padding::Same);
  m.add<BatchNormalization>();
  m.add<ReLU>();
  m.add<MaxPool2D>(Size2{2, 2});
  m.add<Flatten>();
  m.add<Dropout>(0.25f);
  m.add<Dense>(10);
}

// Multiply-adds x2 of each layer's forward at this batch size (0 for layers without weights).
inline std::vector<double> forward_flop(const Sequential& m, int64_t batch) {
  const auto& shapes = m.layer_output_shapes();
  std::vector<double> flop(m.layers().size(), 0.0);
  for (size_t i = 0; i < flop.size(); ++i) {
    const Layer& l = *m.layers()[i];
    if (l.params().empty()) continue;
    const Shape k = l.params()[0].shape();                                              // (K, C, R, S) or (out, in)
    const double per_out = static_cast<double>(k.numel()) / static_cast<double>(k[0]);  // C*R*S or in
    flop[i] = 2.0 * static_cast<double>(shapes[i].numel()) * static_cast<double>(batch) * per_out;
  }
  return flop;
}

// One training step: forward, weight gradients and input gradients (the first layer computes
// no input gradient), for GFLOP/s figures. Pooling, ReLU, loss and Adam are memory-bound and
// not counted.
inline double training_flop(const Sequential& m, int64_t batch) {
  const std::vector<double> f = forward_flop(m, batch);
  double flop = 0;
  for (size_t i = 0; i < f.size(); ++i) flop += f[i] * (i == 0 ? 2.0 : 3.0);
  return flop;
}

// One inference forward (what evaluate() runs per batch).
inline double inference_flop(const Sequential& m, int64_t batch) {
  double flop = 0;
  for (double f : forward_flop(m, batch)) flop += f;
  return flop;
}

}  // namespace ember::apps
