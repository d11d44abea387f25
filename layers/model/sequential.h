/// @file
/// Sequential: a stack of layers trained like Keras' Sequential model, the linear case of the one
/// model engine (layers/model/model.h: fit, evaluate, predict, checkpoints and the rest are
/// Model's).
///
/// @code
///   Sequential model;
///   model.add<Conv2D>(32, Size2{3, 3}, Activation::ReLU);
///   model.add<MaxPool2D>(Size2{2, 2});
///   model.add<Flatten>();
///   model.add<Dense>(10);
///   model.build(Shape{1, 28, 28});             // or let fit() build from the data
///   model.compile(std::make_unique<Adam>());
///   History h = model.fit(train, {.epochs = 5, .batch_size = 64}, &test);
/// @endcode
#pragma once

#include <memory>
#include <utility>

#include "model.h"

namespace ember {

/// A stack of layers, the linear case of Model (see sequential.h).
class Sequential : public Model {
 public:
  Sequential() { name_ = "sequential"; }                              ///< An empty stack named "sequential".
  explicit Sequential(std::string name) { name_ = std::move(name); }  ///< An empty stack named `name`.
  /// Appends a layer; returns it for further configuration. Names default to "conv2d",
  /// "conv2d_1", ... at build(). Error after build().
  Layer& add(std::unique_ptr<Layer> layer) {
    return append(std::shared_ptr<Layer>(std::move(layer)), "Sequential::add");
  }
  /// A layer shared with the caller (layer<L>(...).get(), make_layer(...)).
  template <typename L>
  L& add(std::shared_ptr<L> layer) {
    return static_cast<L&>(append(std::move(layer), "Sequential::add"));
  }
  /// Makes an L from `args`, appends it and returns it: `model.add<Dense>(10)`.
  template <typename L, typename... Args>
  L& add(Args&&... args) {
    return static_cast<L&>(add(std::make_unique<L>(std::forward<Args>(args)...)));
  }
};

}  // namespace ember
