/// @file
/// Building a model as a graph of layer calls (Keras' functional API, with a C++ handle):
///
/// @code
///   SymbolicTensor x = Input(Shape{1, 28, 28});
///   auto conv = layer<Conv2D>(16, Size2{3, 3}, Activation::ReLU, Padding::Same);
///   SymbolicTensor h = conv(x);                                   // calls build the layer
///   SymbolicTensor r = add({h, layer<Conv2D>(16, Size2{3, 3}, Activation::None, Padding::Same)(h)});
///   SymbolicTensor y = layer<Dense>(10)(layer<Flatten>()(r));
///   Model model(x, y);                                            // layers/model/model.h
/// @endcode
///
/// A SymbolicTensor is a per-sample shape and the call that makes it; calling a layer on symbolic
/// tensors builds the layer for their shapes (a shape error names the layer and the shapes then,
/// not at the first batch) and returns its output. layer<L>(args...) makes an L and returns a
/// shared handle to it: the handle calls it, and `->` configures it. Calling one layer object
/// again shares its weights (Keras' shared layers: a siamese tower, a tied embedding): a later
/// call runs a twin the layer registry makes from the layer's type and configuration
/// (layers/model/registry.h; a user layer must be registered), built for that call's inputs, with
/// the first call's parameters and state; the model sums the calls' gradients. Configure a layer
/// before its second call. A Model is callable too (nesting: Model::operator()). Merge layers
/// (layers/merge.h) take a list; add/subtract/multiply/average/maximum/concatenate make and call
/// one in one go.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../../core/shape.h"
#include "../layer.h"
#include "../merge.h"

namespace ember {

namespace detail {
// One call in the graph: a layer on its inputs, or an Input (no layer).
struct GraphNode {
  std::shared_ptr<Layer> layer;
  std::vector<std::shared_ptr<const GraphNode>> inputs;
  Shape shape;             // the per-sample output
  std::string input_name;  // an Input's name ("" until the model names it)
  // A later call of a layer: `layer` is a twin of `shares` (the object called first), with its
  // parameters and state.
  std::shared_ptr<Layer> shares;
  // A built model's call (Model::input, layer_output, a call of a built model): the identity of that
  // model; a model built on it adopts the layer with its values while that model still holds it
  // (model.h). Expired or empty for any other call.
  std::weak_ptr<const void> adopt_from;
  bool adopt = false;  // made by a built model (adopt_from says which)
};
}  // namespace detail

/// A per-sample shape and the call that makes it: what Input() and layer calls return and take
/// (see graph.h).
class SymbolicTensor {
 public:
  /// An undefined symbolic tensor (defined() is false).
  SymbolicTensor() = default;
  /// The output of `node` (made by Input() and call_layer()).
  explicit SymbolicTensor(std::shared_ptr<const detail::GraphNode> node) : node_(std::move(node)) {}
  bool defined() const { return node_ != nullptr; }  ///< Whether an Input or a layer call made it.
  const Shape& shape() const;                        ///< per sample (ArgumentError when undefined)
  const std::shared_ptr<const detail::GraphNode>& node() const { return node_; }  ///< The call that makes it.

 private:
  std::shared_ptr<const detail::GraphNode> node_;
};

/// A model input of per-sample shape `sample_shape` (no batch dimension), named `name` (default
/// "input_1", "input_2", ... in the model).
SymbolicTensor Input(const Shape& sample_shape, std::string name = "");

/// Calls `layer` on `inputs`: builds it for their shapes (Layer::build_inputs) and returns its
/// output. ShapeError / ArgumentError name the layer's type and what did not fit.
SymbolicTensor call_layer(const std::shared_ptr<Layer>& layer, const std::vector<SymbolicTensor>& inputs);

/// A shared handle to a layer that calls it on symbolic tensors (layer<L>(...) makes one).
template <class L>
class LayerRef {
 public:
  explicit LayerRef(std::shared_ptr<L> l) : layer_(std::move(l)) {}  ///< A handle to `l`.
  /// Calls the layer on `x` (call_layer()).
  SymbolicTensor operator()(const SymbolicTensor& x) const { return call_layer(layer_, {x}); }
  /// Calls the layer on several inputs (a merge layer; call_layer()).
  SymbolicTensor operator()(const std::vector<SymbolicTensor>& xs) const { return call_layer(layer_, xs); }
  L* operator->() const { return layer_.get(); }            ///< The layer, to configure it.
  L& operator*() const { return *layer_; }                  ///< The layer.
  const std::shared_ptr<L>& get() const { return layer_; }  ///< The shared layer (Sequential::add takes it).

 private:
  std::shared_ptr<L> layer_;
};

/// Makes an L from `args` and returns a shared handle to it: `layer<Dense>(10)(x)`.
template <class L, class... Args>
LayerRef<L> layer(Args&&... args) {
  return LayerRef<L>(std::make_shared<L>(std::forward<Args>(args)...));
}

/// @name Merge layers made and called in one go (layers/merge.h)
/// @{

SymbolicTensor add(const std::vector<SymbolicTensor>& xs);                  ///< An Add layer called on `xs`.
SymbolicTensor subtract(const SymbolicTensor& a, const SymbolicTensor& b);  ///< A Subtract layer: a - b.
SymbolicTensor multiply(const std::vector<SymbolicTensor>& xs);             ///< A Multiply layer called on `xs`.
SymbolicTensor average(const std::vector<SymbolicTensor>& xs);              ///< An Average layer called on `xs`.
SymbolicTensor maximum(const std::vector<SymbolicTensor>& xs);              ///< A Maximum layer called on `xs`.
/// A Concatenate layer along `axis` called on `xs`.
SymbolicTensor concatenate(const std::vector<SymbolicTensor>& xs, int axis = 1);
/// @}

}  // namespace ember
