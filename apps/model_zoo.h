// The apps' and benchmarks' models (train_mnist --model): the reference CNN (Keras' MNIST
// tutorial model, 93,322 parameters: Conv32-Pool-Conv64-Pool-Conv64-Flatten-Dense64-Dense10, ReLU
// after each Conv and the first Dense), bn-cnn, and the residual resnet (a graph model).
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

// train_mnist --model resnet: a small residual CNN (151,274 parameters; bench/pytorch_resnet.py is
// the same model in PyTorch):
//   stem  Conv32 3x3 - BN - ReLU - MaxPool 2                                 28x28 -> 14x14x32
//   res1  [Conv32 3x3 - BN - ReLU - Conv32 3x3 - BN] + x - ReLU               14x14x32
//   res2  [Conv64 3x3 /2 - BN - ReLU - Conv64 3x3 - BN] + [Conv64 1x1 /2 - BN](x) - ReLU   7x7x64
//   res3  [Conv64 3x3 - BN - ReLU - Conv64 3x3 - BN] + x - ReLU               7x7x64
//   head  GlobalAvgPool2D - Dropout 0.5 - Dense10
// Convolutions SAME-padded and without bias (BatchNormalization's beta takes its place), Keras'
// BatchNormalization defaults. Its recipe (train_mnist's defaults for it): Adam 1e-3 with a cosine
// schedule down to 0 over the epochs. On Fashion-MNIST, 15 epochs, seed 1 (docs/benchmarks.md):
// 92.92% without the Dropout (it overfits: training loss 0.016), 93.04% with Dropout 0.3, 93.11%
// with 0.5.
inline Model make_resnet(const Shape& input = Shape{1, 28, 28}) {
  const auto conv_bn = [](const SymbolicTensor& x, int64_t filters, int64_t size, int64_t stride) {
    const SymbolicTensor c = layer<Conv2D>(filters, Size2{size, size}, Activation::None, Padding::Same,
                                           Size2{stride, stride}, /*use_bias=*/false)(x);
    return layer<BatchNormalization>()(c);
  };
  const auto block = [&](const SymbolicTensor& x, int64_t filters, int64_t stride) {
    const SymbolicTensor h = conv_bn(layer<ReLU>()(conv_bn(x, filters, 3, stride)), filters, 3, 1);
    const SymbolicTensor shortcut = stride != 1 || x.shape()[0] != filters ? conv_bn(x, filters, 1, stride) : x;
    return layer<ReLU>()(add({h, shortcut}));
  };
  const SymbolicTensor x = Input(input);
  SymbolicTensor h = layer<MaxPool2D>(Size2{2, 2})(layer<ReLU>()(conv_bn(x, 32, 3, 1)));
  h = block(h, 32, 1);
  h = block(h, 64, 2);
  h = block(h, 64, 1);
  return Model(x, layer<Dense>(10)(layer<Dropout>(0.5f)(layer<GlobalAvgPool2D>()(h))), "resnet");
}

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
