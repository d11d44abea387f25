// The ready-made models (zoo.h).
#include "zoo.h"

#include "../avgpool2d.h"
#include "../batch_normalization.h"
#include "../conv2d.h"
#include "../dense.h"
#include "../dropout.h"
#include "../flatten.h"
#include "../maxpool2d.h"
#include "../merge.h"
#include "../relu.h"

namespace ember::models {

void add_reference_cnn(Sequential& m, int64_t classes) {
  m.add<Conv2D>(32, Size2{3, 3}, Activation::ReLU);
  m.add<MaxPool2D>(Size2{2, 2});
  m.add<Conv2D>(64, Size2{3, 3}, Activation::ReLU);
  m.add<MaxPool2D>(Size2{2, 2});
  m.add<Conv2D>(64, Size2{3, 3}, Activation::ReLU);
  m.add<Flatten>();
  m.add<Dense>(64, Activation::ReLU);
  m.add<Dense>(classes);
}

Sequential reference_cnn(int64_t classes) {
  Sequential m;
  add_reference_cnn(m, classes);
  return m;
}

void add_bn_cnn(Sequential& m, int64_t classes) {
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
  m.add<Dense>(classes);
}

Sequential bn_cnn(int64_t classes) {
  Sequential m;
  add_bn_cnn(m, classes);
  return m;
}

Model resnet(const Shape& input, int64_t classes) {
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
  return Model(x, layer<Dense>(classes)(layer<Dropout>(0.5f)(layer<GlobalAvgPool2D>()(h))), "resnet");
}

}  // namespace ember::models
